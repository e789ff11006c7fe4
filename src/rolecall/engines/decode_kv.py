"""The decode loop's key/value cache and attention, without the per-step copies.

A decode step of a batch with a long shared prompt is bound by memory traffic, not FLOPs.
transformers' dynamic cache concatenates every layer's keys and values with the new token's
each step (the whole cache copied, every step), and its SDPA path repeats the key/value
heads to the query heads whenever there is a padding mask (the whole cache written again).
Here:

- `buffer_cache`: each layer's keys and values live in a buffer sized for the prompt and the
  budget; a step writes one column in place and attention reads a view of the filled part.
- `folded_decode`: a one-token query's heads that share a key head are laid out as that key
  head's query rows ([B, H, 1, d] -> [B, h, H/h, d]), so attention reads each key head once
  and nothing is repeated. The padding mask [B, 1, 1, L] broadcasts over both.

Both are exact rearrangements of the same arithmetic; the engine's tests compare its tokens
and log-probs with HF `generate`.
"""
from __future__ import annotations

from contextlib import contextmanager

import torch
import torch.nn.functional as F
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from rolecall.policies.attention import attention_as

NAME = "rolecall_folded_decode"


def cache_bytes_per_position(config, dtype: torch.dtype) -> int:
    """Bytes one row's key/value cache takes per position: every layer's keys and values."""
    heads = getattr(config, "num_key_value_heads", None) or getattr(config, "num_attention_heads", 0)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return 2 * config.num_hidden_layers * heads * head_dim * dtype.itemsize


class BufferLayer(DynamicLayer):
    """One layer of `buffer_cache`: keys and values in buffers of `capacity` positions, a
    step's column written in place, a view of the filled part handed to attention."""

    rows: tuple[torch.Tensor, torch.Tensor] | None = None  # set by `prefill_rows`
    total = 0  # the rows of the whole cache while `rows` is set
    _k = _v = None  # the buffers, allocated by the first update

    def __init__(self, index: int, layers: int, block: dict, capacity: int) -> None:
        super().__init__()
        # `block` ("kv": [layers, 2, rows, heads, positions, head_dim]) is shared by the cache's
        # layers alone, so it goes when the cache goes
        self.index, self.layers, self.block, self.capacity = index, layers, block, capacity

    def lazy_initialization(self, key_states, value_states) -> None:
        super().lazy_initialization(key_states, value_states)
        self.filled = 0
        self._k = self._v = None

    def _alloc(self, like: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor]:
        shape = (self.total if self.rows is not None else like.shape[0], like.shape[1], size, like.shape[-1])
        kv = self.block.get("kv")
        if kv is None and self._k is None:
            kv = self.block["kv"] = like.new_empty((self.layers, 2, *shape))
        if kv is not None and self._k is None and tuple(kv.shape[2:]) == shape and kv.dtype == like.dtype:
            return kv[self.index, 0], kv[self.index, 1]
        return like.new_empty(shape), like.new_empty(shape)  # a layer of its own shape, or growth

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        t = key_states.shape[-2]
        if self.rows is not None:  # a prefill window: its prompts' rows, from position 0
            if self._k is None:
                self._k, self._v = self._alloc(key_states, max(self.capacity, t))
            dest, src = self.rows
            self._k[dest, :, :t] = key_states[src]
            self._v[dest, :, :t] = value_states[src]
            self.filled = t
            return key_states, value_states
        n = self.filled
        if self._k is None or n + t > self._k.shape[-2]:
            k, v = self._alloc(key_states, max(self.capacity, n + t) if self._k is None else 2 * (n + t))
            if n:
                k[:, :, :n], v[:, :, :n] = self._k[:, :, :n], self._v[:, :, :n]
            self._k, self._v = k, v
        self._k[:, :, n:n + t] = key_states
        self._v[:, :, n:n + t] = value_states
        self.filled = n + t
        self.keys, self.values = self._k[:, :, :self.filled], self._v[:, :, :self.filled]
        return self.keys, self.values

    def window(self, rows: tuple[torch.Tensor, torch.Tensor] | None, total: int) -> None:
        self.rows, self.total = rows, total
        if self._k is None:
            return
        # empty while a window fills (the model reads the cache's length as the prompt's
        # offset); the whole filled cache once the windows are done
        end = self.filled if rows is None else 0
        self.keys, self.values = self._k[:, :, :end], self._v[:, :, :end]

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.get_seq_length() > 0:
            self._k, self._v = self._k[indices], self._v[indices]
            self.keys, self.values = self._k[:, :, :self.filled], self._v[:, :, :self.filled]

    def reorder_cache(self, beam_idx: torch.Tensor) -> None:
        self.batch_select_indices(beam_idx.to(self._k.device) if self._k is not None else beam_idx)

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.get_seq_length() > 0:
            self.batch_select_indices(torch.arange(self._k.shape[0], device=self._k.device)
                                      .repeat_interleave(repeats))


def buffer_cache(config, capacity: int) -> DynamicCache:
    """A DynamicCache whose layers write into buffers of `capacity` positions (grown by doubling
    if a call ever needs more). The layers' first buffers are views of one block, allocated
    once: one allocation of the whole cache is handed back to the system when the cache goes,
    where sixty separate ones stay in the heap and leave it fragmented (on SmolLM2 a 250-row
    validation piece left 1.15 GB resident after it had finished)."""
    cache = DynamicCache(config=config)
    n, block = len(cache.layers), {}
    cache.layers = [BufferLayer(i, n, block, capacity) for i in range(n)]
    return cache


@contextmanager
def prefill_rows(cache, total: int):
    """Within: `fill(dest, src)` makes the next model call a prefill window: row src[j] of its
    keys and values goes to row dest[j] of a `buffer_cache` of `total` rows (a prompt that
    several rows share is computed once and written to each of them), and the call attends to
    its own prompt only. On exit the cache holds every row, as one whole-batch call leaves it."""
    def fill(dest: torch.Tensor, src: torch.Tensor) -> None:
        for layer in cache.layers:
            layer.window((dest, src), total)

    try:
        yield fill
    finally:
        for layer in cache.layers:
            layer.window(None, total)


def _attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers attention interface. One-token queries with grouped key heads are folded;
    anything else goes to transformers' own SDPA function."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    B, H, T, d = query.shape
    h = key.shape[1]
    if T != 1 or H == h or (attention_mask is not None and attention_mask.shape[1] != 1):
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling,
                                      dropout=dropout, **kwargs)
    out = F.scaled_dot_product_attention(query.reshape(B, h, H // h, d), key, value, attn_mask=attention_mask,
                                         scale=scaling)
    return out.reshape(B, 1, H, d), None


@contextmanager
def folded_decode(model):
    """Within: the model's one-token attention folds grouped query heads (see module doc). Only
    where the model runs transformers' SDPA on CPU; elsewhere nothing changes."""
    if getattr(model.config, "_attn_implementation", None) != "sdpa" or model.device.type != "cpu":
        yield
        return
    # looked up per call, so a test can watch it
    with attention_as(model, NAME, lambda *a, **k: _attention(*a, **k), mask_like="sdpa"):
        yield
