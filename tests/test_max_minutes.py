"""`train.max_minutes`: a wall-clock limit ends the run cleanly at a validated checkpoint, and
`--resume` carries on from there as if nothing had happened."""
from __future__ import annotations

import json

import pytest

from rolecall.config import ConfigError, load_config
from rolecall.train.launch import train


def _cfg(model_dir, *extra):
    return load_config(None, [f"model.path={model_dir}", "rollout.problems_per_step=2", "rollout.group_size=2",
                              "task.n_val=4", "rollout.max_new_tokens=4", "train.steps=4", "train.val_every=3",
                              "train.checkpoint_every=3", *extra])


def _rows(out):
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]


def test_max_minutes_stops_at_a_validated_checkpoint_and_resume_goes_on(tiny_model_dir, tmp_path):
    out, told = tmp_path / "r", []
    # A limit already passed once the first step ends: the run stops right after it.
    train(_cfg(tiny_model_dir, "train.max_minutes=1e-6"), out, notify=told.append)
    rows = _rows(out)
    assert [r["step"] for r in rows if "val/accuracy" not in r and "reward/mean" in r] == [1]
    assert [r["step"] for r in rows if "val/accuracy" in r] == [0, 1]  # step 1 is validated although not due
    assert sorted(p.name for p in (out / "checkpoints").iterdir() if p.name.startswith("step_")) == ["step_1"]
    assert any("train.max_minutes=1e-06 reached after step 1 of 4" in t and "--resume" in t for t in told), told
    train(_cfg(tiny_model_dir), out, resume=True, notify=told.append)
    rows = _rows(out)
    assert [r["step"] for r in rows if "val/accuracy" not in r and "reward/mean" in r] == [1, 2, 3, 4]
    assert [r["step"] for r in rows if "val/accuracy" in r] == [0, 1, 3, 4]
    # Each sitting says where it began, which code wrote it, on which machine and in which dtype (a resume may differ).
    sittings = json.loads((out / "summary.json").read_text())["sittings"]
    assert [s["step"] for s in sittings] == [0, 1]
    assert all(set(s) == {"step", "rolecall", "commit", "dirty", "machine", "precision"} for s in sittings), sittings


def test_max_minutes_must_be_positive():
    with pytest.raises(ConfigError, match="max_minutes"):
        load_config(None, ["train.max_minutes=0"])
