"""Every tensor the engine, the update and the diagnostics create follows the model's device.

No GPU here, so the check turns the question around: the model stays on the CPU while torch's
default device is `meta`. A tensor created without naming a device (`torch.zeros(n)` instead
of `torch.zeros(n, device=model.device)`) then lands on `meta`, and the first time it meets a
model tensor torch raises "Tensor on device meta is not on the expected device cpu" (or it
cannot be read). On a GPU the same slip would put a CPU tensor beside CUDA ones.
"""
from __future__ import annotations

import pytest
import torch

import rolecall


@pytest.fixture
def meta_default():
    torch.set_default_device("meta")
    try:
        yield
    finally:
        torch.set_default_device(None)


def test_the_check_catches_a_tensor_that_does_not_follow_the_model():
    on_model = torch.ones(3)
    torch.set_default_device("meta")
    try:
        with pytest.raises(RuntimeError, match="not on the expected device|meta tensors"):
            float((on_model + torch.zeros(3)).sum())
    finally:
        torch.set_default_device(None)


@pytest.mark.parametrize("routing", ["isolated", "shared"])
def test_a_training_step_validation_and_diagnostics_create_no_stray_tensor(tiny_model_dir, routing, request):
    from rolecall.train.stack import build_stack
    from rolecall.train.step import train_step, validate

    cfg = rolecall.make_config({"model": {"path": str(tiny_model_dir)}, "task": {"n_val": 4}, "routing": routing,
                                "algo": {"kl_coef": 0.01},  # the reference forward too
                                "rollout": {"problems_per_step": 2, "group_size": 2, "max_new_tokens": 4}})
    stack = build_stack(cfg)  # loading happens before: weights are created on the model's device
    try:
        request.getfixturevalue("meta_default")
        row, episodes = train_step(stack, 1)  # rollout (engine), scoring, advantages, update, diagnostics
        val = validate(stack)
    finally:
        torch.set_default_device(None)
        stack.verifier.close()
    assert any(k.startswith("policy/") for k in row) and 0.0 <= val["val/accuracy"] <= 1.0
    assert all(p.device.type == "cpu" for p in stack.model.parameters())
