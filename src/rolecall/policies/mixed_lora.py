"""A mixed-adapter batch in one pass per LoRA layer: every row its own adapter, no loop.

PEFT's `adapter_names` path loops over the distinct adapters in every LoRA layer (a
Python list of row indices, a gather, two matmuls and a scatter per adapter per layer per
decode step). On a small model that per-call overhead is the cost: 3 adapters in one batch
ran no faster than 3 batches (benchmarks/README.md).

Here the adapters of a layer are concatenated once per generate call,
A_cat = [A_1; ...; A_n] (n·r x in) and B_cat = [s_1 B_1 | ... | s_n B_n] (out x n·r), and a
row mask keeps, in the n·r hidden units, only the block of the row's own adapter:

    y = base(x) + ((x A_cat^T) * mask_row) B_cat^T   ==   base(x) + s_k B_k A_k x  for row's k

Two matmuls and a multiply per layer whatever the mix (the single-adapter path does two
matmuls and a multiply too), and no memory that grows with the batch beyond activations;
the price is n x the LoRA FLOPs, small next to the base layer while n·r << hidden size.
Rows of the bare base (`base` policy) have an all-zero mask. Only plain LoRA `Linear`
layers qualify (no DoRA/variants, no fan_in_fan_out, no LoRA bias, eval mode): for anything
else `supports()` says no and the engine falls back to PEFT's path.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

from rolecall.policies.routing import BASE_POLICY


def _lora_linears(model) -> list:
    from peft.tuners.lora import LoraLayer

    return [m for m in model.modules() if isinstance(m, LoraLayer)]


def supports(model, policies: list[str]) -> bool:
    """Whether every LoRA layer is a plain Linear LoRA this forward reproduces exactly."""
    from peft.tuners.lora.layer import Linear

    names = {p for p in policies if p != BASE_POLICY}
    for m in _lora_linears(model):
        if type(m) is not Linear or m.merged or m.disable_adapters or m.fan_in_fan_out:
            return False
        if any(n in getattr(m, "lora_variant", {}) or getattr(m, "lora_bias", {}).get(n, False) for n in names):
            return False
        if not names <= set(m.lora_A.keys()):
            return False
    return True


def _layer_tensors(layer, adapters: list[str], row_adapter_B: torch.Tensor):
    """(A_cat, B_cat with scaling folded in, row mask [B, 1, n·r]) for one layer."""
    A = [layer.lora_A[a].weight for a in adapters]
    B = [layer.lora_B[a].weight * layer.scaling[a] for a in adapters]
    ranks = torch.tensor([a.shape[0] for a in A], device=row_adapter_B.device)
    block_of_unit = torch.repeat_interleave(torch.arange(len(adapters), device=row_adapter_B.device), ranks)
    mask = (block_of_unit.unsqueeze(0) == row_adapter_B.unsqueeze(1)).to(A[0].dtype).unsqueeze(1)
    return torch.cat(A, 0), torch.cat(B, 1), mask


@contextmanager
def row_adapters(model, policies_B: list[str]) -> Iterator[None]:
    """Within the block, every forward of `model` runs row b through adapter `policies_B[b]`.

    The batch size must stay len(policies_B) (HF generate keeps finished rows in the batch).
    Weights are read once at entry: do not train inside the block.
    """
    adapters = sorted({p for p in policies_B if p != BASE_POLICY})
    idx = {a: i for i, a in enumerate(adapters)}
    layers = _lora_linears(model)
    device = layers[0].lora_A[adapters[0]].weight.device if layers and adapters else torch.device("cpu")
    row_adapter_B = torch.tensor([idx.get(p, -1) for p in policies_B], device=device)  # -1: base, no block
    n_rows = len(policies_B)

    def patched(layer, A_cat, B_cat, mask):
        base = layer.base_layer

        def forward(x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
            if x.shape[0] != n_rows:
                raise RuntimeError(f"row_adapters: batch of {x.shape[0]} rows inside a block set up for {n_rows}")
            result = base(x, *args, **kwargs)
            if A_cat is None:  # every row on the bare base
                return result
            h = torch.nn.functional.linear(x.to(A_cat.dtype), A_cat) * mask
            return result + torch.nn.functional.linear(h, B_cat).to(result.dtype)
        return forward

    with torch.no_grad():
        tensors = [_layer_tensors(layer, adapters, row_adapter_B) if adapters else None for layer in layers]
    try:
        for layer, t in zip(layers, tensors):
            # A plain function as instance attribute shadows the class's forward for this block.
            object.__setattr__(layer, "forward", patched(layer, *(t or (None, None, None))))
        yield
    finally:
        for layer in layers:
            layer.__dict__.pop("forward", None)
