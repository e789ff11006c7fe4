"""The GPU tier: `pytest -m gpu` on a machine with CUDA. Skipped (saying so) everywhere else.

Not run where rolecall is developed (no GPU there); written against torch's and PEFT's
documented API and kept small: the same training step as the CPU tests, on a CUDA device,
in bfloat16 where the device supports it.
"""
from __future__ import annotations

import pytest
import torch

import rolecall

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (pytest -m gpu on a GPU machine)")]


def _cfg(model_dir, **extra):
    return rolecall.make_config({"model": {"path": str(model_dir), "device": "cuda", "dtype": "auto"},
                                 "task": {"n_val": 4}, "rollout": {"problems_per_step": 2, "group_size": 2,
                                                                   "max_new_tokens": 4}, **extra})


def test_a_training_step_runs_on_the_gpu(tiny_model_dir):
    from rolecall.train.stack import build_stack
    from rolecall.train.step import train_step, validate

    stack = build_stack(_cfg(tiny_model_dir))
    try:
        assert all(p.device.type == "cuda" for p in stack.model.parameters())
        if torch.cuda.is_bf16_supported():
            assert next(stack.model.parameters()).dtype == torch.bfloat16
        row, _ = train_step(stack, 1)
        assert any(k.startswith("policy/") for k in row)
        assert 0.0 <= validate(stack)["val/accuracy"] <= 1.0
    finally:
        stack.verifier.close()


def test_a_run_trains_checkpoints_and_resumes_on_the_gpu(tiny_model_dir, tmp_path):
    cfg = _cfg(tiny_model_dir, train={"steps": 2, "checkpoint_every": 1})
    run = rolecall.train_run(cfg, tmp_path / "r", notify=lambda text: None)
    more = rolecall.train_run(None, run.path, steps=3, resume=True, notify=lambda text: None)
    assert [r["step"] for r in more.metrics if "reward/mean" in r] == [1, 2, 3]


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices (torchrun over NCCL)")
def test_torchrun_over_nccl_trains_like_one_gpu(tiny_model_dir, tmp_path):
    """The CPU test of torchrun (tests/test_torchrun.py) on 2 GPUs: NCCL, one device per rank."""
    import yaml

    from test_torchrun import VARIED_REWARD, _adapters, _config, _rows, _train

    (tmp_path / "varied_reward.py").write_text(VARIED_REWARD)
    cfg = _config(tiny_model_dir)
    cfg["model"].update(device="cuda", dtype="float32")  # fp32: the comparison is about the sums, not rounding
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    _train(tmp_path, ["cfg.yaml", "--out", "one"], ranks=1)
    _train(tmp_path, ["cfg.yaml", "--out", "two"], ranks=2)
    assert [r.get("reward/mean") for r in _rows(tmp_path / "one")] == [r.get("reward/mean") for r in _rows(tmp_path / "two")]
    w1, w2 = _adapters(tmp_path / "one", 3), _adapters(tmp_path / "two", 3)
    for k in w1:
        assert torch.allclose(w1[k], w2[k], rtol=0, atol=5e-4), k
