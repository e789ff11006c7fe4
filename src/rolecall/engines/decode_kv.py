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

from rolecall.policies.attention import attention_as

NAME = "rolecall_folded_decode"


def cache_bytes_per_position(config, dtype: torch.dtype) -> int:
    """Bytes one row's key/value cache takes per position: every layer's keys and values."""
    heads = getattr(config, "num_key_value_heads", None) or getattr(config, "num_attention_heads", 0)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return 2 * config.num_hidden_layers * heads * head_dim * dtype.itemsize


def buffer_cache(config, capacity: int):
    """A DynamicCache whose layers write into buffers of `capacity` positions (grown by doubling
    if a call ever needs more)."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    class BufferLayer(DynamicLayer):
        def lazy_initialization(self, key_states, value_states) -> None:
            super().lazy_initialization(key_states, value_states)
            self.filled = 0
            self._k = self._v = None

        def _alloc(self, like: torch.Tensor, size: int) -> torch.Tensor:
            return like.new_empty((*like.shape[:2], size, like.shape[-1]))

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            n, t = self.filled, key_states.shape[-2]
            if self._k is None or n + t > self._k.shape[-2]:
                size = max(capacity, 2 * (n + t))
                k, v = self._alloc(key_states, size), self._alloc(value_states, size)
                if n:
                    k[:, :, :n], v[:, :, :n] = self._k[:, :, :n], self._v[:, :, :n]
                self._k, self._v = k, v
            self._k[:, :, n:n + t] = key_states
            self._v[:, :, n:n + t] = value_states
            self.filled = n + t
            self.keys, self.values = self._k[:, :, :self.filled], self._v[:, :, :self.filled]
            return self.keys, self.values

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

    cache = DynamicCache(config=config)
    cache.layers = [BufferLayer() for _ in cache.layers]
    return cache


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
