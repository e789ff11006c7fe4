"""The best validated checkpoint survives `train.keep_last`, is marked in `checkpoints/best.json`
and chosen by `--best`; `train.stop_below_peak` ends a run that stays below its peak, and a
resume remembers the peak and the streak below it.

The collapse is planted: validation returns a fixed accuracy per step (`_plant`), so the peak,
the ties and the fall are exact while the adapters still train for real.
"""
from __future__ import annotations

import errno
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

import rolecall
from conftest import train_moving_run
from rolecall.cli import app
from rolecall.config import ConfigError, load_config
from rolecall.rundir import checkpoint
from rolecall.rundir.checkpoint import BEST, CheckpointError, CheckpointMissing, best_mark, save_checkpoint
from rolecall.rundir.directory import RunDir
from rolecall.train import loop
from rolecall.train.launch import train
from rolecall.train.peak import PEAK, STOP, Peak, recall_peak
from rolecall.train.stack import build_stack

ADAPTER = "generator/adapter_model.safetensors"


def _plant(monkeypatch, accuracy: dict[int, float]) -> None:
    """Validation at step s reports `accuracy[s]` (keyed by step, so a resumed run replays it)."""
    at = {}
    real = loop.validation

    def validation(stack, log, share, step, peak, *rest):
        at["step"] = step
        return real(stack, log, share, step, peak, *rest)

    monkeypatch.setattr(loop, "validation", validation)
    monkeypatch.setattr(loop, "validate_episodes", lambda stack: ({"val/accuracy": accuracy[at["step"]]}, []))


def _overrides(model_dir, *extra) -> list[str]:
    return [f"model.path={model_dir}", "rollout.problems_per_step=2", "rollout.group_size=2", "task.n_val=2",
            "rollout.max_new_tokens=4", "train.threads=1", "train.diagnostics=basic", "train.val_every=1",
            "train.checkpoint_every=100", "train.keep_last=1", *extra]


def _steps(out) -> list[str]:
    return sorted((p.name for p in (out / "checkpoints").iterdir() if p.name.startswith("step_")),
                  key=lambda n: int(n[5:]))


def _trained(out) -> list[int]:
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return [r["step"] for r in rows if "event" not in r and "val/accuracy" not in r]


def _summary(out) -> dict:
    return json.loads((out / "summary.json").read_text())


# --- the rule -----------------------------------------------------------------------------------

def test_the_peak_rule_ignores_the_base_keeps_the_earlier_of_a_tie_and_counts_a_streak():
    peak = Peak(load_config(None, ["train.stop_below_peak=0.1", "train.stop_patience=2"]).train)
    assert peak.observe(0, 0.9) is None and peak.step is None  # step 0 is the base model: no checkpoint
    assert peak.observe(1, 0.75) == PEAK
    assert peak.observe(2, 0.75) is None and peak.step == 1  # a tie keeps the earlier
    assert peak.observe(3, 0.65) is None and peak.below == 1  # exactly the margin below counts
    assert peak.observe(4, 0.70) is None and peak.below == 0  # within the margin: the streak restarts
    assert peak.observe(5, 0.6) is None and peak.observe(6, 0.0) == STOP
    off = Peak(load_config(None, []).train)  # the early stop is off by default
    assert [off.observe(s, v) for s, v in ((1, 0.9), (2, 0.0), (3, 0.0), (4, 0.0))] == [PEAK, None, None, None]


def test_stop_fields_are_checked_naming_them():
    with pytest.raises(ConfigError, match="stop_below_peak"):
        load_config(None, ["train.stop_below_peak=0"])
    with pytest.raises(ConfigError, match="stop_patience"):
        load_config(None, ["train.stop_patience=0"])


# --- a planted collapse: the best survives keep_last=1 and --best exports it ---------------------------

@pytest.fixture(scope="module")
def collapsed(tiny_model_dir, tmp_path_factory):
    """Four steps whose validation rises to 0.8 at step 2, ties it at 3 and collapses at 4;
    keep_last=1 and checkpoint_every=100, so only the peak's own save can keep step 2."""
    mp = pytest.MonkeyPatch()
    _plant(mp, {0: 0.3, 1: 0.5, 2: 0.8, 3: 0.8, 4: 0.0})
    cfg = {"model": {"path": str(tiny_model_dir)}, "task": {"n_val": 2}, "optim": {"lr": 0.05},
           "rollout": {"problems_per_step": 2, "group_size": 4, "max_new_tokens": 6},
           "train": {"steps": 4, "val_every": 1, "checkpoint_every": 100, "keep_last": 1, "diagnostics": "basic"}}
    try:
        return train_moving_run(tmp_path_factory.mktemp("collapse"), cfg, "r")
    finally:
        mp.undo()


def test_the_best_checkpoint_outlives_keep_last_and_is_marked(collapsed):
    out = collapsed.path
    assert _steps(out) == ["step_2", "step_4"]  # the last (keep_last=1) and the best; step_1 was pruned
    assert best_mark(out) == {"step": 2, "checkpoint": "step_2", "metric": "val/accuracy", "value": 0.8}
    assert checkpoint.is_complete(out / "checkpoints" / "step_2")
    assert _summary(out)["stopped"] is None  # ran to the end


def test_export_best_writes_the_best_checkpoints_adapter(collapsed, tmp_path):
    out = collapsed.path
    res = CliRunner().invoke(app, ["export", str(out), "--best", "--out", str(tmp_path / "e")])
    assert res.exit_code == 0, res.output
    exported = load_file(str(tmp_path / "e" / ADAPTER))
    best, last = (load_file(str(out / "checkpoints" / s / ADAPTER)) for s in ("step_2", "step_4"))
    assert exported.keys() == best.keys()
    assert all(torch.equal(exported[k], best[k]) for k in best)
    assert any(not torch.equal(best[k], last[k]) for k in best), "the adapters must have moved after the peak"
    assert "| training steps | 2 |" in (tmp_path / "e" / "generator" / "README.md").read_text()
    res = CliRunner().invoke(app, ["export", str(out), "--best", "--step", "4", "--out", str(tmp_path / "f")])
    assert res.exit_code == 2 and "--best" in res.output and "--step 4" in res.output, res.output


def test_evaluate_and_generate_take_the_best_on_request(collapsed, monkeypatch):
    monkeypatch.chdir(collapsed.path.parent)  # where its reward module sits
    assert rolecall.evaluate(collapsed, best=True)["checkpoint"] == str(collapsed.path / "checkpoints" / "step_2")
    assert isinstance(rolecall.generate(collapsed, "generator", "1+1", best=True, max_new_tokens=2), str)


def test_a_run_without_a_best_marker_gives_a_clear_error_on_best(collapsed, tmp_path):
    old = shutil.copytree(collapsed.path, tmp_path / "old")
    (old / "checkpoints" / BEST).unlink()  # a run from before the best was kept
    for args in (["export", str(old), "--best"], ["eval", str(old), "--best"],
                 ["generate", str(old), "--best", "--role", "generator", "--prompt", "1+1"]):
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 2, (args, res.output)
        assert "--best" in res.output and "no best checkpoint marked" in res.output and "Traceback" not in res.output
    with pytest.raises(CheckpointMissing, match="--step N"):
        rolecall.export_run(old, best=True)


def test_a_resume_re_marks_the_best_a_kill_left_unmarked(collapsed, tmp_path):
    run = shutil.copytree(collapsed.path, tmp_path / "r")
    (run / "checkpoints" / BEST).unlink()  # killed between step_2's save and its marker
    recalled = recall_peak(RunDir(run), 4, 0.5, notify=lambda _: None)
    assert (recalled.step, recalled.value, recalled.below) == (2, 0.8, 1)  # step 4 is 0.8 below, step 3 a tie
    assert best_mark(run)["step"] == 2
    assert recall_peak(RunDir(run), 1, None, notify=lambda _: None).step is None  # step_1 is gone: nothing kept
    assert best_mark(run) is None, "a marker naming a step a resume dropped must go"


# --- the marker under faults ----------------------------------------------------------------------

def test_retention_keeps_the_marked_best_and_a_failed_marker_keeps_the_old_one(tiny_model_dir, tmp_path, monkeypatch):
    stack = build_stack(load_config(None, _overrides(tiny_model_dir)))

    def save(step, best=None):
        return save_checkpoint(tmp_path, step, stack.model, stack.optims, stack.routing.adapters, 1, best=best)

    save(1, ("val/accuracy", 0.5))
    save(2)
    save(3)
    assert _steps(tmp_path) == ["step_1", "step_3"] and best_mark(tmp_path)["step"] == 1
    real = checkpoint.write_durable

    def full_disk(path, data):
        if path.name == BEST:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real(path, data)

    monkeypatch.setattr(checkpoint, "write_durable", full_disk)
    with pytest.raises(CheckpointError, match="step_4 is saved, but checkpoints/best.json could not be updated"):
        save(4, ("val/accuracy", 0.9))
    monkeypatch.setattr(checkpoint, "write_durable", real)
    assert best_mark(tmp_path)["step"] == 1 and "step_1" in _steps(tmp_path), "the old best stays named and kept"
    assert (tmp_path / "checkpoints" / "latest").read_text() == "step_4\n"
    assert not [p for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith(".tmp-")]
    save(5, ("val/accuracy", 0.9))
    assert _steps(tmp_path) == ["step_5"] and best_mark(tmp_path)["step"] == 5  # the old best goes once beaten


# --- the early stop and its resume ------------------------------------------------------------------

FALL = {0: 0.2, 1: 0.4, 2: 0.6, 3: 0.5, 4: 0.4, 5: 0.3, 6: 0.3, 7: 0.9, 8: 0.85, 9: 0.85, 10: 0.85}


@pytest.fixture(scope="module")
def stopped_early(tiny_model_dir, tmp_path_factory):
    """`rolecall train` with stop_below_peak=0.2: the peak 0.6 at step 2, within the margin at 3,
    at least 0.2 below at 4 and 5 (patience 2): it stops after step 5, exit 0."""
    mp = pytest.MonkeyPatch()
    _plant(mp, FALL)
    out = tmp_path_factory.mktemp("early") / "r"
    try:
        res = CliRunner().invoke(app, ["train", *_overrides(tiny_model_dir, "train.steps=10", "train.stop_below_peak=0.2"),
                                       "--out", str(out)])
    finally:
        mp.undo()
    return out, res


def test_the_early_stop_ends_the_run_checkpointed_with_the_best_kept(stopped_early):
    out, res = stopped_early
    assert res.exit_code == 0, res.output
    assert "train.stop_below_peak=0.2" in res.output and "Stopped after step 5" in res.output
    assert _trained(out) == [1, 2, 3, 4, 5]
    assert _steps(out) == ["step_2", "step_5"] and best_mark(out)["step"] == 2
    stopped = _summary(out)["stopped"]
    assert stopped["reason"] == "stop_below_peak" and stopped["step"] == 5 and "peak 0.600" in stopped["message"]


def test_a_resume_still_below_the_peak_stops_at_its_next_validation(stopped_early, tmp_path, tiny_model_dir,
                                                                    monkeypatch):
    out = shutil.copytree(stopped_early[0], tmp_path / "r")
    _plant(monkeypatch, FALL)
    told = []
    # A changed patience resumes (train.* fields are not in the fingerprint): the restored streak of
    # 2 meets patience 3 at step 6, still 0.3 below the peak 0.6 of step 2.
    train(load_config(None, _overrides(tiny_model_dir, "train.steps=10", "train.stop_below_peak=0.2",
                                       "train.stop_patience=3")), out, resume=True, notify=told.append)
    assert _trained(out) == [1, 2, 3, 4, 5, 6]
    assert _summary(out)["stopped"]["step"] == 6 and any("Stopped after step 6" in t for t in told), told
    assert _steps(out) == ["step_2", "step_6"] and best_mark(out)["step"] == 2


def test_a_resume_that_recovers_trains_on_and_moves_the_best(stopped_early, tmp_path, tiny_model_dir, monkeypatch):
    out = shutil.copytree(stopped_early[0], tmp_path / "r")
    _plant(monkeypatch, {**FALL, 6: 0.6})  # back to the peak (a tie): the streak ends
    train(load_config(None, _overrides(tiny_model_dir, "train.steps=10", "train.stop_below_peak=0.2")), out,
          resume=True, notify=lambda _: None)
    assert _trained(out) == list(range(1, 11)) and _summary(out)["stopped"] is None
    assert best_mark(out)["step"] == 7 and _steps(out) == ["step_7", "step_10"]  # the old best step_2 pruned


def test_a_resume_after_a_crash_knows_a_peak_from_before_it(tiny_model_dir, tmp_path, monkeypatch):
    """The peak (step 2) and one validation below it (step 3) come before the process ends; the
    resumed run's first validation below (step 4) completes the streak instead of being a new peak."""
    _plant(monkeypatch, {0: 0.2, 1: 0.4, 2: 0.8, 3: 0.5, 4: 0.4, 5: 0.9, 6: 0.9})
    out = tmp_path / "r"
    cfg = load_config(None, _overrides(tiny_model_dir, "train.steps=6", "train.stop_below_peak=0.2",
                                       "train.checkpoint_every=1"))
    train(cfg, out, stop_after=3, notify=lambda _: None)
    assert _trained(out) == [1, 2, 3] and _steps(out) == ["step_2", "step_3"]
    train(cfg, out, resume=True, notify=lambda _: None)
    assert _trained(out) == [1, 2, 3, 4] and _summary(out)["stopped"]["reason"] == "stop_below_peak"
    assert best_mark(out) == {"step": 2, "checkpoint": "step_2", "metric": "val/accuracy", "value": 0.8}
