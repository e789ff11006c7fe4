"""`torchrun --nproc-per-node 2 -m rolecall train` on CPU (gloo): the ranks share the rollout
and the update, rank 0 alone writes the run directory, and the run (and its resume) ends
where one process ends."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

sys.path.insert(0, str(Path(__file__).parent))
from dp_common import VARIED_REWARD  # noqa: E402


def _config(model_dir: Path) -> dict:
    return {"model": {"path": str(model_dir)}, "task": {"n_val": 5}, "reward": {"name": "varied_reward:reward"},
            "optim": {"lr": 0.05}, "algo": {"micro_batch_tokens": 64},  # several micro-batches to deal out
            "rollout": {"problems_per_step": 3, "group_size": 4, "max_new_tokens": 6, "request_seeds": True},
            "train": {"threads": 1, "steps": 3, "val_every": 2, "checkpoint_every": 1}}


def _env(here: Path) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(here)}  # the reward module sits there
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    return env


def _train(here: Path, args: list[str], ranks: int) -> subprocess.CompletedProcess:
    launch = ([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
              if ranks > 1 else [sys.executable])
    p = subprocess.run([*launch, "-m", "rolecall", "train", *args], cwd=here, env=_env(here),
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p


def _rows(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]


def _adapters(run: Path, step: int) -> dict[str, torch.Tensor]:
    out = {}
    for f in sorted((run / "checkpoints" / f"step_{step}").rglob("*.safetensors")):
        out.update({f"{f.parent.name}/{k}": v for k, v in load_file(f).items()})
    assert out, f"no adapter files in {run}/checkpoints/step_{step}"
    return out


def test_torchrun_two_ranks_train_and_resume_like_one_process(tiny_model_dir, tmp_path):
    (tmp_path / "varied_reward.py").write_text(VARIED_REWARD)
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(_config(tiny_model_dir)))
    # 2 steps, then a resume to step 3 (on two ranks rank 0 decides where; both load it).
    for out, ranks in (("one", 1), ("two", 2)):
        p = _train(tmp_path, ["cfg.yaml", "--out", out, "--steps", "2"], ranks=ranks)
        said = p.stdout + p.stderr
        assert said.count("run directory:") == 1 and said.count("val/accuracy") == 2, said  # only rank 0 speaks
        _train(tmp_path, ["--resume", out, "--steps", "3"], ranks=ranks)
    one, two = tmp_path / "one", tmp_path / "two"

    rows_1, rows_2 = _rows(one), _rows(two)  # steps, validations and alarms (which must agree too)
    steps = lambda rows: [(r["step"], "val/accuracy" in r, r.get("alarm")) for r in rows]  # noqa: E731
    assert steps(rows_2) == steps(rows_1)  # one row per step and validation: rank 1 wrote none
    for a, b in zip(rows_1, rows_2):
        for key in ("reward/mean", "val/accuracy"):  # the same episodes, shared out and gathered
            assert a.get(key) == b.get(key), (a["step"], key)
        role_keys = [k for k in a if k.startswith("role/") and k.rsplit("/", 1)[1] in ("entropy", "training_ppl")]
        assert role_keys or "reward/mean" not in a
        for key in role_keys:  # per-role metrics cover both ranks' micro-batches
            assert b[key] == pytest.approx(a[key], rel=1e-4), key
    for key in [k for k in rows_1[1] if k.startswith("policy/") and k.endswith("/loss")]:
        assert rows_2[1][key] == pytest.approx(rows_1[1][key], rel=1e-4, abs=1e-6), key
    w1, w2 = _adapters(one, 3), _adapters(two, 3)
    assert w1.keys() == w2.keys()
    moved = 0
    for k in w1:
        # Gradients agree to ~1e-6 relative (summation order); Adam's first steps, about
        # lr * sign(g), let that show as up to ~1e-4 in a weight. A rank's missing share would be ~1e-2.
        assert torch.allclose(w1[k], w2[k], rtol=0, atol=5e-4), (k, float((w1[k] - w2[k]).abs().max()))
        moved += int(not torch.equal(w2[k], _adapters(two, 1)[k]))
    assert moved > 0  # training moved the adapters between the checkpoints compared


def test_torchrun_without_out_is_refused(tmp_path):
    env = {**_env(tmp_path), "WORLD_SIZE": "2", "RANK": "0"}
    p = subprocess.run([sys.executable, "-m", "rolecall", "train", "--steps", "1"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "needs --out" in p.stderr + p.stdout
