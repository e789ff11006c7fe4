"""A frozen linear layer plus one LoRA adapter as one autograd node: y = x W^T + b + s (x A^T) B^T.

Written as separate modules (PEFT's layout), autograd sums the two gradients that reach x
(through W and through A) in a pass of its own over [tokens, in], and adding the LoRA term
to the base output copies that output once more. Here the LoRA term is accumulated into the
base output in place, and the backward accumulates both input-gradient terms into one
buffer, the LoRA one by `addmm_`. Measured by a probe since retired
(`benchmarks/results/history/fused_lora.json`; the two paths alternating in one process,
medians): on a 28 M-parameter Qwen3 with LoRA r 16 on every linear layer, an update of 4
prompts x 8 samples of 800 + 256 tokens on one adapter takes 0.96 of the separate modules'
time, and 6 prompts x 2 samples on two adapters in one forward (the row-masked mix) 0.94; on
the 1.6 M-parameter embedded model, where per-call overhead dominates, 0.97.

It applies where the arithmetic is exactly PEFT's: a plain `nn.Linear` base whose weights
are frozen, no dropout on the adapter's input, one dtype throughout.
"""
from __future__ import annotations

import torch


class LoraLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, lora_A, lora_B, scaling):
        x2 = x.reshape(-1, x.shape[-1])
        h = torch.mm(x2, lora_A.t())  # [T, r]
        _scale(h, x.shape, scaling)  # on the narrow side
        out = torch.mm(x2, weight.t()) if bias is None else torch.addmm(bias, x2, weight.t())
        out.addmm_(h, lora_B.t())
        ctx.save_for_backward(x2, weight, lora_A, lora_B, h)
        ctx.scaling = scaling
        ctx.in_shape = x.shape
        return out.view(*x.shape[:-1], out.shape[-1])

    @staticmethod
    def backward(ctx, grad_out):
        x2, weight, lora_A, lora_B, h = ctx.saved_tensors
        g = grad_out.reshape(-1, grad_out.shape[-1])
        gh = _scale(torch.mm(g, lora_B), ctx.in_shape, ctx.scaling)  # d loss / d (x A^T), [T, r]
        grad_x = grad_A = grad_B = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_x = torch.mm(g, weight).addmm_(gh, lora_A).view(ctx.in_shape)
        if ctx.needs_input_grad[2]:
            grad_bias = g.sum(0)
        if ctx.needs_input_grad[3]:
            grad_A = torch.mm(gh.t(), x2)
        if ctx.needs_input_grad[4]:
            grad_B = torch.mm(g.t(), h)
        return grad_x, None, grad_bias, grad_A, grad_B, None


def _scale(h: torch.Tensor, in_shape, scaling) -> torch.Tensor:
    """h [T, r] times `scaling` in place: a number, or a tensor that broadcasts against
    [*in_shape[:-1], r] (a mask that scales each row's own adapter block and zeroes the rest)."""
    if isinstance(scaling, torch.Tensor):
        h.view(*in_shape[:-1], h.shape[-1]).mul_(scaling)
    else:
        h.mul_(scaling)
    return h


def fusable(base, dropout, x: torch.Tensor, lora_A: torch.Tensor, lora_B: torch.Tensor) -> bool:
    """Whether `lora_linear` computes exactly what base(x) + s B A dropout(x) would."""
    return (type(base) is torch.nn.Linear and not base.weight.requires_grad
            and (base.bias is None or not base.bias.requires_grad)
            and isinstance(dropout, torch.nn.Identity)
            and x.dtype == base.weight.dtype == lora_A.dtype == lora_B.dtype)


def lora_linear(x, base, lora_A, lora_B, scaling: float | torch.Tensor) -> torch.Tensor:
    """base(x) + ((x A^T) * scaling) B^T. `scaling` is the adapter's s, or a tensor for several
    adapters concatenated in A and B (see lora_router); it takes no gradient."""
    if not isinstance(scaling, torch.Tensor):
        scaling = float(scaling)
    return LoraLinear.apply(x, base.weight, base.bias, lora_A, lora_B, scaling)
