"""Which LoRA adapter each row of a forward runs through: one policy, the bare base, or one per row.

PEFT switches adapters by walking every module (`set_adapter`, `disable_adapter`: 5-25 ms a
call on the embedded model, several calls a step) and mixes adapters in a batch with a
Python loop per adapter in every layer. On a small model that bookkeeping is the cost.

The router installs, once, a forward on every plain LoRA `Linear` layer that reads one
shared mode, so switching policy is an attribute write. Modes:

- `policy(name)`: every row on one adapter, PEFT's arithmetic (`base + s B A dropout(x)`);
  `base` runs the bare base model.
- `rows(policies_B)` / `mixed(policies)`: row b on adapter k(b). The adapters of a layer are
  concatenated, A_cat = [A_1; ...; A_n] (n·r x in) and B_cat = [B_1 | ... | B_n]
  (out x n·r), and a row mask keeps, in the n·r hidden units, only the block of the row's
  own adapter, scaled by its s_k:

      y = base(x) + ((x A_cat^T) * mask_row) B_cat^T   ==   base(x) + s_k B_k A_k x

  Two matmuls and a multiply per layer whatever the mix; the price is n x the LoRA FLOPs,
  small next to the base layer while n·r << hidden size. `rows` (by policy name) and
  `mixed(frozen=True)` read each layer's weights once per block, at its first forward
  (generation; inside the forward, so FSDP-sharded weights are gathered); plain `mixed` reads
  them once per forward pass, so gradients reach every adapter from its own rows only
  (training several policies in one forward and backward).

Outside a router block the layers run PEFT's own forward, so PEFT's API keeps working.
Only plain LoRA qualifies (no DoRA or other variants, no fan_in_fan_out, no LoRA bias, not
merged, one dropout rate): for anything else `plain()` says no and `policy()` falls back to
PEFT's `set_adapter`/`disable_adapter`; callers split mixed batches into one per policy.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch
import torch.nn.functional as F

from rolecall.policies.lora_linear import fusable, lora_linear
from rolecall.policies.routing import BASE_POLICY

_ATTR = "_rolecall_lora_router"


@dataclass
class _Mode:
    kind: str  # "single" | "base" | "rows"
    adapter: str = ""  # single
    adapters: tuple[str, ...] = ()  # rows: block k of the concatenation is adapters[k]
    block_B: torch.Tensor | None = None  # rows: adapter index per row, -1 = bare base
    frozen: dict[int, tuple[torch.Tensor, torch.Tensor]] | None = None  # A_cat, B_cat per layer, read once a block
    weights: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)  # else: this pass's read
    only: str | None = None  # rows, not frozen: the one adapter every row of this call is on, if so
    masks: dict[tuple, torch.Tensor] = field(default_factory=dict)  # per (rank, scaling) layout, for block_B
    layer_masks: dict[int, torch.Tensor] = field(default_factory=dict)  # the same, looked up per layer


def _lora_linears(model) -> list:
    from peft.tuners.lora import LoraLayer

    return [m for m in model.modules() if isinstance(m, LoraLayer)]


class LoraRouter:
    def __init__(self, model) -> None:
        self.model = model
        self.layers = _lora_linears(model) if hasattr(model, "peft_config") else []
        self.mode: _Mode | None = None
        self.n_adapters = len(getattr(model, "peft_config", {}))
        self._plain: dict[tuple, bool] = {}
        for layer in self.layers:
            # A plain function as instance attribute shadows the class's forward.
            object.__setattr__(layer, "forward", self._forward_for(layer))

    # ---- what can be routed --------------------------------------------------------------
    def plain(self, policies) -> bool:
        """Whether every LoRA layer is a plain Linear LoRA this router reproduces exactly."""
        names = frozenset(p for p in policies if p != BASE_POLICY)
        # Cached with the layer flags PEFT can flip in place (merge, disable).
        key = (names, tuple((m.merged, m.disable_adapters) for m in self.layers))
        if key not in self._plain:
            self._plain[key] = self._check_plain(names)
        return self._plain[key]

    def _check_plain(self, names: frozenset[str]) -> bool:
        from peft.tuners.lora.layer import Linear

        for m in self.layers:
            if type(m) is not Linear or m.merged or m.disable_adapters or m.fan_in_fan_out:
                return False
            if any(n in getattr(m, "lora_variant", {}) or getattr(m, "lora_bias", {}).get(n, False) for n in names):
                return False
            if not names <= set(m.lora_A.keys()):
                return False
            if len({_dropout_p(m.lora_dropout[n]) for n in names}) > 1:  # one dropout draw serves every block
                return False
        return True

    # ---- modes ----------------------------------------------------------------------------
    @contextmanager
    def policy(self, name: str) -> Iterator[None]:
        """Every row on one policy: its adapter alone, or the bare base for `base`."""
        if not self.layers:
            yield
            return
        if not self.plain([name]):
            with self._peft_policy(name):
                yield
            return
        with self._mode(_Mode("base") if name == BASE_POLICY else _Mode("single", adapter=name)):
            yield

    @contextmanager
    def _peft_policy(self, name: str) -> Iterator[None]:
        """PEFT's own switches, for adapters the router cannot run. PEFT's set_adapter and
        disable_adapter also change which adapters require grad (only the active one, or
        none); which adapters train is the routing's decision (build_stack), so the flags
        are put back."""
        flags = [(p, p.requires_grad) for n, p in self.model.named_parameters() if "lora_" in n]

        def restore() -> None:
            for p, flag in flags:
                p.requires_grad_(flag)

        try:
            if name == BASE_POLICY:
                with self.model.disable_adapter():
                    yield
            else:
                self.model.set_adapter(name)
                restore()
                yield
        finally:
            restore()

    @contextmanager
    def rows(self, policies_B: list[str]) -> Iterator[Callable[[list[str]], None]]:
        """Row b on `policies_B[b]`, weights read once at entry (do not train inside the block).

        Yields `route(policies)` to route a later call whose rows have other policies (of the
        same set), e.g. a prefill of the distinct prompts, then every row.
        """
        adapters = tuple(sorted({p for p in policies_B if p != BASE_POLICY}))
        idx = {a: i for i, a in enumerate(adapters)}
        with self.mixed(adapters, frozen=True) as set_rows:
            def route(policies: list[str]) -> None:
                set_rows(self._block([-1 if p == BASE_POLICY else idx[p] for p in policies]))

            route(policies_B)
            yield route

    @contextmanager
    def mixed(self, policies, frozen: bool = False) -> Iterator[Callable[[torch.Tensor, bool], None]]:
        """A block whose forwards mix `policies`; yields `set_rows(index_B, new_pass)`, called
        before each model call with every row's index into `policies` (-1: the bare base; the
        batch size may change between calls).

        `frozen` reads the adapter weights once per block (generation). Otherwise `new_pass`
        re-reads them: set it on the first call of each forward pass (a backward frees the
        graph the previous read belongs to, and an optimizer step changes the weights);
        calls within one pass share one read.
        """
        adapters = tuple(policies)
        if BASE_POLICY in adapters:
            raise ValueError("mixed(): the bare base is not an adapter; route its rows with index -1")
        mode = _Mode("rows", adapters=adapters)
        if frozen:  # read per layer at its first forward in the block, where FSDP has gathered its shards
            mode.frozen = {}

        def set_rows(index_B: torch.Tensor, new_pass: bool = True) -> None:
            mode.block_B, mode.masks, mode.layer_masks = index_B, {}, {}
            # A call whose rows are all on one adapter runs that adapter alone: the mix would
            # multiply by n x r hidden units, n - 1 blocks of them masked to zero (in a
            # training step, the mini-batches after the first are often one policy's rows).
            # Not in a frozen block, which reads the weights once for FSDP's gathered shards.
            first = int(index_B[0]) if index_B.numel() and not frozen else -1
            mode.only = adapters[first] if first >= 0 and bool((index_B == first).all()) else None
            if new_pass:
                mode.weights = {}

        with self._mode(mode):
            yield set_rows

    @contextmanager
    def _mode(self, mode: _Mode) -> Iterator[None]:
        prev, self.mode = self.mode, mode
        try:
            yield
        finally:
            self.mode = prev

    def _block(self, index: list[int]) -> torch.Tensor:
        device = self.layers[0].base_layer.weight.device if self.layers else torch.device("cpu")
        return torch.tensor(index, device=device)

    def half(self, layer, A: torch.Tensor, B: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """A and B in the base's half `dtype`. With gradients: a fresh cast, through which the
        gradient reaches the float32 weights. Without (sampling: every decode step calls each
        layer): the cast made for these weights' current values (`_version` moves with every
        in-place update, an optimizer step included), so a rollout casts each adapter once. Only
        an adapter's own weights are kept (they live as long as the model); a multi-adapter
        concatenation is cast afresh."""
        if torch.is_grad_enabled() or not isinstance(A, torch.nn.Parameter):  # a concatenation lives one mode only
            return A.to(dtype), B.to(dtype)
        cache = self.__dict__.setdefault("_half", {})
        key = (id(layer), id(A), id(B), dtype)
        hit = cache.get(key)
        if hit is None or hit[0] != (A._version, B._version):
            hit = cache[key] = ((A._version, B._version), A.detach().to(dtype), B.detach().to(dtype))
        return hit[1], hit[2]

    # ---- the forward ----------------------------------------------------------------------
    def _forward_for(self, layer):
        peft_forward = type(layer).forward
        base = layer.base_layer
        router = self

        def forward(x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
            mode = router.mode
            if mode is None:
                return peft_forward(layer, x, *args, **kwargs)
            if mode.kind == "base" or (mode.kind == "single" and mode.adapter not in layer.lora_A) \
                    or (mode.kind != "single" and not mode.adapters):
                # the bare base; or a layer this adapter does not target (PEFT skips it too)
                return base(x, *args, **kwargs)
            if mode.kind != "single" and x.shape[0] != mode.block_B.shape[0]:
                raise RuntimeError(f"lora router: batch of {x.shape[0]} rows where {mode.block_B.shape[0]} were routed")
            if mode.kind == "single" or mode.only is not None:
                a = mode.adapter if mode.kind == "single" else mode.only
                dropout, A, B, scale = layer.lora_dropout[a], layer.lora_A[a].weight, layer.lora_B[a].weight, layer.scaling[a]
            else:
                if mode.frozen is not None:
                    A, B = mode.frozen.get(id(layer)) or mode.frozen.setdefault(
                        id(layer), _cat_frozen(layer, mode.adapters, base.weight.dtype))
                else:
                    A, B = mode.weights.get(id(layer)) or mode.weights.setdefault(id(layer), _cat(layer, mode.adapters))
                scale = mode.layer_masks.get(id(layer))
                if scale is None:
                    scale = mode.layer_masks[id(layer)] = _mask(mode, layer)
                dropout = layer.lora_dropout[mode.adapters[0]]
            if A.dtype != x.dtype and x.dtype == base.weight.dtype and x.dtype in _HALF:
                # float32 master adapters on a bf16/fp16 base: the adapter's matmuls run in the base's
                # dtype and the gradient reaches the float32 weights through the cast, as autocast
                # does. Mixing dtypes instead cast every [tokens, width] activation to float32 and
                # back, a third of a bf16 update on SmolLM2 (profiled).
                A, B = router.half(layer, A, B, x.dtype)
            # (a row mask [B, 1, n·r] lines up with [B, T, in] inputs only)
            if not args and not kwargs and (not isinstance(scale, torch.Tensor) or x.dim() == 3) and fusable(base, dropout, x, A, B):
                return lora_linear(x, base, A, B, scale)
            # The scaling goes on the r-wide hidden units, not the layer-wide output (r multiplies
            # per token instead of `out`), in place: linear's backward does not need its output.
            h = F.linear(dropout(_as(x, A.dtype)), A).mul_(scale)
            return _add_lora(base(x, *args, **kwargs), h, B)
        return forward


_HALF = (torch.bfloat16, torch.float16)


def _add_lora(result: torch.Tensor, h: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """result + h B^T as one addmm where the dtypes allow. Measured: faster than matmul + add
    (batch 48 on the embedded model, 3 adapters; one adapter on a 28 M-parameter model,
    11k tokens, forward and backward: 0.34 s against 0.37 s for mm, scale, add)."""
    if result.dtype == h.dtype == B.dtype and result.is_contiguous() and h.is_contiguous():
        return torch.addmm(result.view(-1, result.shape[-1]), h.view(-1, h.shape[-1]), B.t()).view(result.shape)
    return _as(result + F.linear(h, B), result.dtype)


def _as(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return t if t.dtype == dtype else t.to(dtype)


def _cat(layer, adapters: tuple[str, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """A_cat [n·r, in] and B_cat [out, n·r] (the scalings are in the row mask)."""
    return (torch.cat([layer.lora_A[a].weight for a in adapters], 0),
            torch.cat([layer.lora_B[a].weight for a in adapters], 1))


@torch.no_grad()
def _cat_frozen(layer, adapters: tuple[str, ...], base_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """`_cat` outside autograd, for a block that only generates (a copy: FSDP may free the
    gathered weights). On a half base, in the base's dtype: cast once a block, where a cast
    at each call cost two conversions per layer per decode step (4 % of a two-adapter decode
    on SmolLM2 in bf16, profiled)."""
    A, B = _cat(layer, adapters)
    return (A.to(base_dtype), B.to(base_dtype)) if base_dtype in _HALF else (A, B)


def _mask(mode: _Mode, layer) -> torch.Tensor:
    """[B, 1, n·r]: s_k on the hidden units of row's own adapter k, 0 elsewhere (layers of one
    rank layout and scalings share it)."""
    key = tuple((layer.r[a], layer.scaling[a]) for a in mode.adapters)
    m = mode.masks.get(key)
    if m is None:
        device = mode.block_B.device
        ranks = torch.tensor([r for r, _ in key], device=device)
        block_of_unit = torch.repeat_interleave(torch.arange(len(key), device=device), ranks)
        scale_of_unit = torch.repeat_interleave(torch.tensor([s for _, s in key], device=device), ranks)
        dtype = layer.lora_A[mode.adapters[0]].weight.dtype
        hit = block_of_unit.unsqueeze(0) == mode.block_B.unsqueeze(1)
        m = mode.masks[key] = (hit * scale_of_unit).to(dtype).unsqueeze(1)
    return m


def _dropout_p(module) -> float:
    return float(getattr(module, "p", 0.0))


def router_for(model) -> LoraRouter:
    """The model's router, installed on first use, and again when adapters were added (a new
    target module brings new LoRA layers; adapters on the same layers are read at call time)."""
    r = model.__dict__.get(_ATTR)
    n_adapters = len(getattr(model, "peft_config", {}))
    if r is None or r.n_adapters != n_adapters:
        r = LoraRouter(model)
        model.__dict__[_ATTR] = r
    return r
