"""Checkpoints under faults: kill -9 inside a save, damaged or missing markers, a full disk,
retention. The previous checkpoint always survives, and nothing partial is ever resumed from.

The kill test forks real training processes (tiny model) from a pre-imported parent and
SIGKILLs each inside a checkpoint save; `ROLECALL_KILL_TRIALS` sets how many (CI: 20).
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import queue
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rolecall.cli import app
from rolecall.config import load_config
from rolecall import fsio
from rolecall.rundir import checkpoint
from rolecall.rundir.checkpoint import (CheckpointError, discard_partial, latest_checkpoint, load_checkpoint,
                                       save_checkpoint)
from rolecall.train.stack import build_stack

KILL_TRIALS = int(os.environ.get("ROLECALL_KILL_TRIALS", "3"))
STEP_DIR = re.compile(r"step_\d+")


def _overrides(model_dir) -> list[str]:
    return [f"model.path={model_dir}", "rollout.problems_per_step=2", "rollout.group_size=2",
            "rollout.max_new_tokens=4", "task.n_val=4", "train.threads=1", "train.diagnostics=basic",
            "train.steps=100000", "train.checkpoint_every=1", "train.val_every=100000", "train.keep_last=2"]


@pytest.fixture(scope="module")
def stack(tiny_model_dir):
    return build_stack(load_config(None, _overrides(tiny_model_dir)))


def _save(stack, run, step, keep_last=3):
    return save_checkpoint(run, step, stack.model, stack.optims, stack.routing.adapters, keep_last)


def _load(stack, ckpt) -> int:
    return load_checkpoint(ckpt, stack.model, stack.optims, stack.routing.adapters)


def _entries(run) -> set[str]:
    return {p.name for p in (run / "checkpoints").iterdir()}


def _temps(run) -> list[Path]:
    return [p for p in (run / "checkpoints").iterdir() if p.name.startswith(".tmp-")]


# --- latest_checkpoint never selects a partial directory -------------------------------------

def test_latest_checkpoint_only_ever_returns_a_complete_step_directory(stack, tmp_path):
    run, root = tmp_path, tmp_path / "checkpoints"
    _save(stack, run, 1)
    _save(stack, run, 2)
    assert latest_checkpoint(run) == root / "step_2"
    # A save killed after writing every file but before its rename: complete contents, temp name.
    shutil.copytree(root / "step_2", root / ".tmp-step_3-999")
    (root / "latest").unlink()
    assert latest_checkpoint(run) == root / "step_2", "fallback must skip temp dirs"
    shutil.copytree(root / "step_2", tmp_path / "step_9")  # complete, but outside checkpoints/
    for marker in (".tmp-step_3-999", "step_7", "../step_9", "\x00garbage"):
        (root / "latest").write_text(marker)
        assert latest_checkpoint(run) == root / "step_2", marker
    # The marker names a damaged checkpoint: a file shorter than the manifest says, or missing.
    (root / "latest").write_text("step_2\n")
    state = root / "step_2" / "trainer_state.pt"
    state.write_bytes(state.read_bytes()[:-10])
    assert latest_checkpoint(run) == root / "step_1"
    (root / "step_1" / "generator" / "adapter_config.json").unlink()
    assert latest_checkpoint(run) is None
    assert latest_checkpoint(tmp_path / "nowhere") is None


def test_next_save_and_resume_clean_up_partial_directories(stack, tmp_path):
    run, root = tmp_path, tmp_path / "checkpoints"
    _save(stack, run, 1)
    (root / ".tmp-step_2-999" / "generator").mkdir(parents=True)
    (root / ".tmp-latest-999").write_text("step_2")
    _save(stack, run, 2)
    assert _entries(run) == {"step_1", "step_2", "latest"}
    # Resume from step 1 (as if step 2's marker never landed): temp dirs and the later step go.
    (root / ".tmp-step_3-999").mkdir()
    discard_partial(run, newer_than=1)
    assert _entries(run) == {"step_1", "latest"}
    assert latest_checkpoint(run) == root / "step_1"


# --- retention ----------------------------------------------------------------------------------

def test_keep_last_keeps_exactly_that_many_complete_checkpoints(stack, tmp_path):
    for step in range(1, 6):
        _save(stack, tmp_path, step, keep_last=2)
    assert _entries(tmp_path) == {"step_4", "step_5", "latest"}
    assert (tmp_path / "checkpoints" / "latest").read_text().strip() == "step_5"
    assert latest_checkpoint(tmp_path).name == "step_5" and _load(stack, latest_checkpoint(tmp_path)) == 5


# --- a full disk --------------------------------------------------------------------------------

class _FullDisk:
    """`os` for checkpoint.py whose writes to any file with `path_part` in its path fail with
    ENOSPC after half the bytes land, like a disk filling up mid-file."""

    def __init__(self, path_part: str) -> None:
        self.path_part, self.paths = path_part, {}

    def __getattr__(self, name):
        return getattr(os, name)

    def open(self, path, *a, **kw):
        fd = os.open(path, *a, **kw)
        self.paths[fd] = str(path)
        return fd

    def write(self, fd, data):
        if self.path_part in self.paths.get(fd, ""):
            os.write(fd, bytes(data[: len(data) // 2]))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return os.write(fd, data)


def _patch_os(monkeypatch, fake) -> None:
    """`os` for the checkpoint module and the durable-write helper it writes every file through."""
    monkeypatch.setattr(checkpoint, "os", fake)
    monkeypatch.setattr(fsio, "os", fake)


# In write order; the `latest` marker is written after the step directory is already in place.
@pytest.mark.parametrize("fills_at", ["adapter_model.safetensors", "adapter_config.json", "trainer_state.pt",
                                      "checkpoint.json", ".tmp-latest-"])
def test_disk_full_mid_save_fails_clearly_and_keeps_the_previous_checkpoint(stack, tmp_path, monkeypatch, fills_at):
    run, root = tmp_path / "run", tmp_path / "run" / "checkpoints"
    _save(stack, run, 1)
    _save(stack, run, 2)
    _patch_os(monkeypatch, _FullDisk(fills_at))
    with pytest.raises(CheckpointError, match="the disk is full") as e:
        _save(stack, run, 3)
    _patch_os(monkeypatch, os)
    assert str(root / "step_3") in str(e.value)
    assert _entries(run) == {"step_1", "step_2", "latest"}, "no temp dir or unmarked step may be left"
    assert (root / "latest").read_text() == "step_2\n"
    assert _load(stack, latest_checkpoint(run)) == 2


def test_a_full_disk_stops_training_with_a_clear_error(tiny_model_dir, tmp_path, monkeypatch):
    _patch_os(monkeypatch, _FullDisk(path_part=".tmp-step_2-"))
    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["train", *_overrides(tiny_model_dir), "--steps", "4", "--out", str(out)])
    _patch_os(monkeypatch, os)
    assert res.exit_code == 2, res.output
    assert "the disk is full" in res.output and str(out / "checkpoints" / "step_2") in res.output
    assert _entries(out) == {"step_1", "latest"}
    steps = [r["step"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())]
    assert max(steps) == 2, "training must stop at the failed save"
    fresh = build_stack(load_config(None, _overrides(tiny_model_dir)))
    assert _load(fresh, latest_checkpoint(out)) == 1


# --- kill -9 inside a save ----------------------------------------------------------------------

def _say(line: str) -> None:
    os.write(1, (line + "\n").encode())


def _train_child(loop, launch, cfg, out: Path) -> None:
    """Train (resuming when the run exists), saying when each save starts and ends, until killed."""
    real = loop.save_checkpoint

    def announced(run_dir, step, *a, **kw):
        _say(f"start {step}")
        path = real(run_dir, step, *a, **kw)
        _say(f"end {step}")
        return path

    loop.save_checkpoint = announced
    try:
        launch.train(cfg, out, resume=(out / "config.yaml").exists())
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(0)


def zygote_main(out: str, overrides: list[str]) -> None:
    """Warm up once, then fork one training child per stdin line.

    The warm-up trains one step elsewhere so that every lazy import (about 10 s of
    transformers) is done before forking; with one torch thread, forking is safe.
    """
    from rolecall.train import launch, loop

    cfg = load_config(None, overrides)
    launch.train(cfg, Path(out).parent / "warm-up", stop_after=1)
    while sys.stdin.readline():
        pid = os.fork()
        if pid == 0:
            _train_child(loop, launch, cfg, Path(out))
        _say(f"pid {pid}")
        os.waitpid(pid, 0)
        _say(f"dead {pid}")


class _Zygote:
    def __init__(self, out: Path, overrides: list[str], log: Path) -> None:
        code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
                "from test_checkpoint_faults import zygote_main; zygote_main(sys.argv[1], sys.argv[2:])")
        self.log, self.stderr = log, open(log, "w")
        self.proc = subprocess.Popen([sys.executable, "-c", code, str(out), *overrides], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.stderr, text=True)
        self.events: queue.Queue = queue.Queue()
        self.child: int | None = None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.events.put(line.split())
        self.events.put(["exited", "0"])

    def event(self, timeout: float = 120, *, dead_ok: bool = False) -> tuple[str, int, float]:
        try:
            kind, n = self.events.get(timeout=timeout)
        except queue.Empty:
            kind, n = "silent", 0
        if kind in ("silent", "exited") or (kind == "dead" and not dead_ok):
            raise AssertionError(f"the training child is {kind}; its log:\n{self.log.read_text()[-3000:]}")
        return kind, int(n), time.monotonic()

    def fork(self) -> int:
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        kind, self.child, _ = self.event()
        assert kind == "pid"
        return self.child

    def kill(self, pid: int) -> None:
        os.kill(pid, signal.SIGKILL)
        while self.event(dead_ok=True)[0] != "dead":  # events the child wrote before it died
            pass
        self.child = None

    def close(self) -> None:
        """Stop everything, also after a failed assertion left a child training."""
        if self.child is not None:
            with contextlib.suppress(ProcessLookupError):  # it may have died on its own
                os.kill(self.child, signal.SIGKILL)
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.stderr.close()


def _await_save(z: _Zygote, durations: list[float]) -> tuple[int, float]:
    """Wait for a save to start once a checkpoint exists; time the uninterrupted ones."""
    started = None
    while True:
        kind, step, t = z.event()
        if kind == "start" and len(durations) >= 3:
            return step, t
        if kind == "start":
            started = t
        elif kind == "end" and started is not None:
            durations.append(t - started)


def _outcome(run: Path, killed: int) -> str:
    """Where in the save the kill landed, read from what it left on disk."""
    root = run / "checkpoints"
    marker = (root / "latest").read_text().strip() if (root / "latest").exists() else None
    if marker is not None and STEP_DIR.fullmatch(marker) and int(marker.removeprefix("step_")) >= killed:
        return "after commit"  # retention, the next training step, or (on a busy machine) the next save
    if (root / f"step_{killed}").exists():
        return "renamed, unmarked"
    if any(p.name.startswith(f".tmp-step_{killed}-") for p in root.iterdir()):
        return "writing temp dir"
    return "before temp dir"


def _check_recoverable(run: Path, killed: int, fresh) -> None:
    ckpt = latest_checkpoint(run)
    assert ckpt is not None and ckpt.parent == run / "checkpoints" and STEP_DIR.fullmatch(ckpt.name), ckpt
    # Nothing lost: checkpoint_every=1, so the previous save is at most one step back. On a busy
    # machine the kill can land after the next save too (killed + 1): later, never earlier.
    assert _load(fresh, ckpt) >= killed - 1
    # Without the marker (lost or torn), the fallback must still find a complete checkpoint.
    copy = run.parent / "copy"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(run / "checkpoints", copy / "checkpoints")
    (copy / "checkpoints" / "latest").unlink(missing_ok=True)
    fallback = latest_checkpoint(copy)
    assert fallback is not None and STEP_DIR.fullmatch(fallback.name)
    assert _load(fresh, fallback) >= killed - 1


def test_kill_9_inside_checkpoint_saves_never_loses_the_previous_checkpoint(tiny_model_dir, tmp_path):
    run = tmp_path / "run"
    overrides = _overrides(tiny_model_dir)
    fresh = build_stack(load_config(None, overrides))  # a process that never trained: loads what the kills left
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    # Kill delays cover 0..1.5 save durations in equal strata: every phase of the save gets hit.
    fractions = [1.5 * (i + rng.random()) / KILL_TRIALS for i in range(KILL_TRIALS)]
    rng.shuffle(fractions)
    durations: list[float] = []
    outcomes: Counter = Counter()
    leftovers: list[Path] = []
    z = _Zygote(run, overrides, tmp_path / "child.log")
    try:
        for frac in fractions:
            pid = z.fork()
            step, started = _await_save(z, durations)
            time.sleep(max(0.0, started + frac * statistics.median(durations) - time.monotonic()))
            z.kill(pid)
            # This child resumed before it saved: the last trial's leftovers must be gone.
            assert not [p for p in leftovers if p.exists()], f"seed {seed}: resume left {leftovers}"
            outcomes[_outcome(run, step)] += 1
            _check_recoverable(run, step, fresh)
            leftovers = _temps(run)
        # One more resume, allowed to finish a save: no debris, exactly keep_last checkpoints.
        pid = z.fork()
        while z.event()[0] != "end":
            pass
        z.kill(pid)
    finally:
        z.close()
    assert not [p for p in leftovers if p.exists()]
    assert len(_entries(run)) == 3 and "latest" in _entries(run) and not _temps(run), _entries(run)  # keep_last=2
    print(f"kill outcomes over {KILL_TRIALS} trials (seed {seed}): {dict(outcomes)}; "
          f"save takes ~{statistics.median(durations) * 1000:.0f} ms")
    # The kills really landed inside saves, not only between them.
    assert outcomes["before temp dir"] + outcomes["writing temp dir"] + outcomes["renamed, unmarked"] >= 1, outcomes
    if KILL_TRIALS >= 10:
        assert outcomes["writing temp dir"] >= 1, outcomes
