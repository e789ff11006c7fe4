"""A run directory in users' hands: one process holds it at a time (a killed holder leaves
no stuck lock), and Ctrl-C / SIGTERM finish the step, save it and say how to resume."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rolecall.cli import app
from rolecall.config import load_config
from rolecall.rundir.checkpoint import latest_checkpoint
from rolecall.train.launch import train
from rolecall.rundir.directory import RunDirBusy, hold


# How long to wait for a child's progress: each wait ends as soon as its condition holds, so this
# is no cost on an idle machine, and a busy one (other runs on the same cores) is not a failure.
PATIENCE = 900


def _overrides(model_dir, *extra) -> list[str]:
    return [f"model.path={model_dir}", "rollout.problems_per_step=2", "rollout.group_size=2",
            "rollout.max_new_tokens=4", "task.n_val=4", "train.threads=1", "train.diagnostics=basic", *extra]


def _rows(run: Path) -> list[dict]:
    f = run / "metrics.jsonl"
    return [json.loads(x) for x in f.read_text().splitlines()] if f.exists() else []


def _train_steps(run: Path) -> list[int]:
    return [r["step"] for r in _rows(run) if "val/accuracy" not in r]


def _cli(*args: str, env_extra: dict | None = None) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200", **(env_extra or {})}
    return subprocess.Popen([sys.executable, "-m", "rolecall", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def _wait_for(cond, timeout: float, proc: subprocess.Popen | None = None) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"process ended early ({proc.returncode}): {proc.communicate()[1][-3000:]}")
        if time.monotonic() > end:
            raise AssertionError("timed out waiting")
        time.sleep(0.1)


# --- one holder at a time ---------------------------------------------------------------------

def test_a_second_holder_is_refused_naming_the_pid(tmp_path):
    with hold(tmp_path / "run"):
        with pytest.raises(RunDirBusy, match=rf"in use by another rolecall process \(pid {os.getpid()} on "):
            with hold(tmp_path / "run"):
                pass
    with hold(tmp_path / "run"):  # released on exit
        pass


def test_train_and_resume_on_a_held_directory_are_refused_and_change_nothing(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    train(load_config(None, _overrides(tiny_model_dir, "train.steps=1")), out, notify=lambda _: None)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name != ".lock"}
    with hold(out):
        for resume in (False, True):
            with pytest.raises(RunDirBusy, match=f"pid {os.getpid()}"):
                train(load_config(None, _overrides(tiny_model_dir, "train.steps=2")), out, resume=resume)
        res = CliRunner().invoke(app, ["train", "--resume", str(out), "--steps", "2"])
        assert res.exit_code == 2 and "in use by another rolecall process" in res.output, res.output
        assert "Traceback" not in res.output
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name != ".lock"} == before


def test_two_processes_started_apart_never_share_a_run_directory(tiny_model_dir, tmp_path):
    """The case found in use: a second `train --out X` started while the first runs."""
    out = tmp_path / "run"
    args = ["train", *_overrides(tiny_model_dir, "train.steps=6", "train.checkpoint_every=2"), "--out", str(out)]
    first = _cli(*args)
    _wait_for(lambda: (out / ".lock").exists() and (out / ".lock").read_text(), PATIENCE, first)
    second = _cli(*args)
    _, err2 = second.communicate(timeout=PATIENCE)
    assert second.returncode == 2, err2
    # Refused either way: naming the holder while the first still runs, or as a run already there
    # once it has finished (on a busy machine the first may end before the second looks).
    assert (f"pid {first.pid}" in err2 or "already holds a run" in err2) and "Traceback" not in err2, err2
    _, err1 = first.communicate(timeout=PATIENCE)
    assert first.returncode == 0, err1
    assert _train_steps(out) == [1, 2, 3, 4, 5, 6], "rows of one run only, each step once"
    assert sorted(p.name for p in (out / "checkpoints").iterdir() if p.name.startswith("step_")) == ["step_2", "step_4", "step_6"]


def test_a_killed_holder_leaves_no_stuck_lock(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    proc = _cli("train", *_overrides(tiny_model_dir, "train.steps=1000", "train.checkpoint_every=1"), "--out", str(out))
    _wait_for(lambda: latest_checkpoint(out) is not None, PATIENCE, proc)
    proc.kill()
    proc.communicate()
    res = CliRunner().invoke(app, ["train", "--resume", str(out), "--steps", str(max(_train_steps(out)) + 1)])
    assert res.exit_code == 0, res.output


# --- Ctrl-C and SIGTERM -----------------------------------------------------------------------

@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_finishes_the_step_saves_it_and_names_the_resume_command(tiny_model_dir, tmp_path, sig):
    """The case found in use: Ctrl-C at step 8 of 30 with checkpoints every 100 saved nothing."""
    out = tmp_path / "run"
    proc = _cli("train", *_overrides(tiny_model_dir, "train.steps=30", "train.checkpoint_every=100",
                                     "train.val_every=5"), "--out", str(out))
    _wait_for(lambda: len(_train_steps(out)) >= 3, PATIENCE, proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=PATIENCE)
    assert proc.returncode == 128 + sig, err
    last = max(_train_steps(out))
    assert last < 30
    assert f"checkpoint step_{last} is saved" in err and f"rolecall train --resume {out}" in err, err
    assert "Traceback" not in err, err
    assert latest_checkpoint(out).name == f"step_{last}"
    assert _train_steps(out) == list(range(1, last + 1)), "nothing lost, nothing interleaved"
    # The resume continues from the saved step, runs a validation the stop skipped, and finishes.
    res = CliRunner().invoke(app, ["train", "--resume", str(out), "--steps", str(last + 2)])
    assert res.exit_code == 0, res.output
    assert _train_steps(out) == list(range(1, last + 3))
    vals = [r["step"] for r in _rows(out) if "val/accuracy" in r]
    assert vals == sorted(set(vals)) and {0, last + 2} <= set(vals)
    assert all(s in vals for s in range(5, last + 3, 5)), vals


def test_a_second_signal_stops_at_once_keeping_the_last_checkpoint(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    # Long steps (many tokens) so that both signals land inside one step.
    proc = _cli("train", *_overrides(tiny_model_dir, "train.steps=30", "train.checkpoint_every=1",
                                     "rollout.max_new_tokens=400", "rollout.problems_per_step=16"), "--out", str(out))
    _wait_for(lambda: latest_checkpoint(out) is not None, PATIENCE, proc)
    saved = latest_checkpoint(out).name
    proc.send_signal(signal.SIGINT)
    time.sleep(0.1)
    proc.send_signal(signal.SIGINT)  # the same Ctrl-C forwarded by a wrapper: still the graceful stop
    time.sleep(1.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=PATIENCE)
    assert proc.returncode == 130, err
    assert "stopped at once; the last saved checkpoint, step_" in err and "Traceback" not in err, err
    ckpt = latest_checkpoint(out)
    assert ckpt is not None and int(ckpt.name[5:]) >= int(saved[5:])


def test_a_signal_delivered_twice_at_once_counts_once_and_a_later_one_stops():
    from rolecall.rundir.stop import DUPLICATE_S, StopRequest

    said: list[str] = []
    with StopRequest(said.append) as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)  # forwarded by a wrapper within milliseconds
        assert stop.requested and stop.name == "SIGTERM" and len(said) == 1
        stop._at -= DUPLICATE_S  # as if the next one came a second later
        with pytest.raises(KeyboardInterrupt, match="second SIGTERM"):
            os.kill(os.getpid(), signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, "handlers are restored"


def test_inside_unsaved_work_the_first_signal_stops_at_once():
    """Work that saves only when it ends has no step to finish: waiting would run it to its end."""
    from rolecall.rundir.stop import StopRequest, TrainingStopped

    said: list[str] = []
    with StopRequest(said.append) as stop:
        with pytest.raises(TrainingStopped, match="in corpus by SIGTERM") as e:
            with stop.unsaved(lambda name: f"in corpus by {name}"):
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)  # not reached: the handler raises at once
        assert e.value.exit_code == 128 + signal.SIGTERM and not said
        with pytest.raises(TrainingStopped, match="already asked: SIGTERM"):  # a request made before the block
            with stop.unsaved(lambda name: f"already asked: {name}"):
                raise AssertionError("the block must not start")
    with StopRequest(said.append) as stop:
        with stop.unsaved(lambda name: "unused"):
            pass
        os.kill(os.getpid(), signal.SIGINT)  # after the block: the graceful request again
        assert stop.requested and len(said) == 1


def test_a_stop_inside_an_episode_coroutine_is_not_swallowed():
    """Found in CI: a signal landing inside workflow code was wrapped as a workflow error and
    kept by its asyncio task until every other episode had finished."""
    import asyncio

    from rolecall.rundir.stop import StopRequest, TrainingStopped

    async def episode(i: int) -> None:
        try:
            if i == 0:
                os.kill(os.getpid(), signal.SIGTERM)
                sum(range(1000))  # the handler runs here, inside the task
            await asyncio.sleep(0 if i == 0 else 30)
        except Exception as e:  # what rollout does with any error in workflow code
            raise RuntimeError("workflow failed") from e

    async def everything() -> None:
        # the stopped task keeps its exception unread; asyncio would log that when it is collected
        asyncio.get_running_loop().set_exception_handler(lambda loop, context: None)
        await asyncio.gather(*(episode(i) for i in range(4)))

    t0 = time.monotonic()
    with StopRequest(lambda text: None) as stop:
        with pytest.raises(TrainingStopped, match="stopped in the corpus"):
            with stop.unsaved(lambda name: "stopped in the corpus"):
                asyncio.run(everything())
    assert time.monotonic() - t0 < 10, "the other episodes ran to their end first"
