"""The FLOP formula of benchmarks/compute.py (model-FLOP utilization) against torch's own FLOP
counter on a small model of the same layout: the linear layers, LoRA and the head, forward
and training (frozen base, LoRA trained)."""
from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.compute import Shape, make_model  # noqa: E402

SHAPE = Shape(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, intermediate=128, lora_r=4)


def _model(tmp_path):
    from rolecall.policies.model import attach_adapters, load_model

    model = attach_adapters(load_model(str(make_model(tmp_path / "m", SHAPE))), ["a"], r=SHAPE.lora_r,
                            alpha=8, dropout=0.0, target_modules="all-linear")
    for n, p in model.named_parameters():
        p.requires_grad_("lora_" in n)
    return model


def _matmul_flops(counter: FlopCounterMode) -> int:
    """Every matmul the counter saw, attention's excepted (the formula counts causal attention apart)."""
    return sum(v for op, v in counter.get_flop_counts()["Global"].items() if "attention" not in str(op))


def test_forward_flops_of_linears_lora_and_head(tmp_path):
    model = _model(tmp_path)
    T = 12
    ids = torch.randint(3, SHAPE.vocab, (1, T))
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(input_ids=ids)
    expected = T * (2 * SHAPE.n_lin + SHAPE.lora_flops_per_token + 2 * SHAPE.hidden * SHAPE.vocab)
    assert _matmul_flops(counter) == expected


def test_training_flops_are_forward_input_gradients_and_lora_gradients(tmp_path):
    model = _model(tmp_path)
    T = 12
    ids = torch.randint(3, SHAPE.vocab, (1, T))
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids).logits.sum().backward()
    head = 2 * SHAPE.hidden * SHAPE.vocab
    # The formula's training count: linear 4 N_lin, LoRA 3x, head forward + input-gradient, less
    # what autograd rightly skips: the first layer's q/k/v take the frozen embedding, so no
    # input-gradient flows into them.
    d = SHAPE.hidden
    q_k_v = sum(i * o for i, o in SHAPE.linears()[:3])
    expected = T * (4 * SHAPE.n_lin + 3 * SHAPE.lora_flops_per_token + 2 * head - 2 * q_k_v)
    # LoRA A of those three layers still gets its weight gradient but passes none to the input.
    lora_skip = T * sum(2 * SHAPE.lora_r * i for i, _ in SHAPE.linears()[:3])
    assert _matmul_flops(counter) == expected - lora_skip, d


def test_the_training_count_of_the_benchmark_matches_the_counter(tmp_path):
    """flops_train's linear, LoRA and head terms for one prompt and no completion pass sharing:
    one row of P prompt tokens and C completion tokens, attention left out on both sides."""
    from benchmarks.compute import flops_train

    model = _model(tmp_path)
    P, C = 7, 5

    class NoAttention(Shape):
        def attn_flops(self, context: int) -> int:
            return 0

    zero_attn = NoAttention(**SHAPE.__dict__)
    ids = torch.randint(3, SHAPE.vocab, (1, P + C - 1))  # the last completion token is never fed
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids).logits.sum().backward()
    head_extra = 2 * 2 * SHAPE.hidden * SHAPE.vocab * (P + C - 1 - C)  # logits the trainer does not compute
    assert _matmul_flops(counter) - head_extra == flops_train(zero_attn, 1, 1, P, C)
