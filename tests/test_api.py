"""rolecall as a library: config from a dict, train, evaluate and read a run, also from inside an event loop."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import rolecall
from rolecall.config import ConfigError


def _small(model_dir) -> dict:
    return {"model": {"path": str(model_dir)}, "task": {"n_val": 4},
            "rollout": {"problems_per_step": 2, "group_size": 2, "max_new_tokens": 4},
            "train": {"steps": 2, "val_every": 2, "checkpoint_every": 2}}


def test_config_from_a_dict_with_overrides_leaves_the_dict_alone():
    tree = {"workflow": {"name": "eval_opt"}, "train": {"steps": 5}}
    cfg = rolecall.make_config(tree, {"train.steps": 7, "routing": "shared"})
    assert (cfg.workflow.name, cfg.train.steps, cfg.routing) == ("eval_opt", 7, "shared")
    assert tree == {"workflow": {"name": "eval_opt"}, "train": {"steps": 5}}
    assert rolecall.make_config(cfg, ["algo.estimator=rloo"]).algo.estimator == "rloo"
    assert rolecall.make_config("examples/debate").workflow.name == "debate"
    with pytest.raises(ConfigError, match="rollout.group_sizes: unknown key"):
        rolecall.make_config({"rollout": {"group_sizes": 3}})
    with pytest.raises(ConfigError, match="overrides"):
        rolecall.make_config(None, "train.steps=2")


def test_train_evaluate_and_read_a_run(tiny_model_dir, tmp_path):
    seen = []
    run = rolecall.train_run(_small(tiny_model_dir), tmp_path / "r", on_event=lambda kind, row: seen.append(kind),
                         notify=lambda text: None)
    assert isinstance(run, rolecall.Run) and run.path == tmp_path / "r"
    assert [r["step"] for r in run.metrics if "reward/mean" in r] == [1, 2]
    assert seen.count("step") == 2 and "val" in seen
    assert run.config.train.steps == 2 and run.summary["steps"] == 2
    assert run.latest_checkpoint.name == "step_2"
    result = rolecall.evaluate(run)
    assert 0.0 <= result["val/accuracy"] <= 1.0 and result["checkpoint"].endswith("step_2")
    assert rolecall.read_run(run.path).path == run.path
    with pytest.raises(ValueError, match="not a run directory"):
        rolecall.read_run(tmp_path)
    # resume to more steps, from Python
    more = rolecall.train_run(None, run.path, steps=3, resume=True, notify=lambda text: None)
    assert [r["step"] for r in more.metrics if "reward/mean" in r] == [1, 2, 3]


SCRIPT = """
import asyncio, json, sys
import rolecall

async def main():
    # A notebook's situation: an event loop is running while training is called.
    await asyncio.sleep(0)
    run = rolecall.train_run(json.loads(sys.argv[1]), sys.argv[2], notify=lambda text: None)
    return [r["step"] for r in run.metrics if "reward/mean" in r]

print(json.dumps(asyncio.run(main())))
"""


def test_python_c_trains_two_steps_from_a_dict_inside_a_running_event_loop(tiny_model_dir, tmp_path):
    out = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(_small(tiny_model_dir)), str(tmp_path / "r")],
                         capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [1, 2]


def test_import_rolecall_is_light():
    code = "import sys, rolecall; print(sorted(m for m in ('torch', 'transformers', 'peft') if m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "[]"
    assert "train_run" in rolecall.__all__ and rolecall.Config.__name__ == "Config"
    with pytest.raises(AttributeError):
        rolecall.nope
