"""Running the product's own commands from a benchmark: a child `rolecall` process that is stopped
with its driver, and an output folder a benchmark may clear only when it wrote it."""
from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONFIGS = HERE.parent / "configs" / "examples"


def run_child(cmd: list[str], **kw) -> None:
    """Run a training command to the end. If this driver is stopped (Ctrl-C, or SIGTERM from
    `kill`/`pkill`), the child is stopped too: an orphaned run would keep the CPU and skew
    every timed benchmark after it. SIGTERM (not SIGINT, which a driver started with `&`
    passes on ignored) lets the trainer save its step first."""
    def on_term(signum, frame):
        raise KeyboardInterrupt
    proc = subprocess.Popen(cmd, **kw)
    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        rc = proc.wait()
    except KeyboardInterrupt:
        rc = None  # stopped: the child is stopped below, then this driver exits without a traceback
    finally:
        signal.signal(signal.SIGTERM, previous)
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
    if rc is None:
        print(f"stopped: {' '.join(map(str, cmd[:4]))} ... was stopped too (a training run saves its step first)",
              file=sys.stderr)
        raise SystemExit(130)
    if rc:
        raise subprocess.CalledProcessError(rc, cmd)


def clear_own(out: Path, *markers: str) -> None:
    """Remove `out` before a benchmark writes it again, only when a file this benchmark leaves
    there (`markers`, relative to `out`) shows the benchmark wrote it; refuse any other folder,
    so a mistyped --out never deletes a user's files."""
    if not out.exists():
        return
    if not any((out / m).exists() for m in markers):
        raise SystemExit(f"{out} exists and was not written by this benchmark (none of {', '.join(markers)} "
                         "in it); choose another --out")
    shutil.rmtree(out)
