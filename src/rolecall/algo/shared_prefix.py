"""Attention of completion rows to a prompt they share, without copying the prompt's keys.

The trainer runs each distinct prompt once and every completion row on top of it
(`train.forward`). The plain way reads the prompt's keys and values through a per-row copy:
G samples of an 800-token prompt copy its cache G times a layer, concatenate it with each
row's own keys, and send the gradients back through the same copies. On CPU those copies
took about a tenth of a training step at 8 samples of an 800-token prompt.

Here a row's attention is split in two parts and combined exactly by their log-sum-exps:

- prompt part: every query of every sample of prompt u attends to u's keys, with no causal
  mask (a completion sees its whole prompt). The G samples' queries, and the query heads
  that share a key head, are stacked into one long query block per key head, so the prompt's
  keys are read once per prompt, not once per row and head.
- completion part: each row's queries attend causally to its own completion keys.

softmax over [prompt, completion] = the two parts' outputs weighted by exp(lse_part - lse).
The backward is the flash-attention backward of each part run with the combined output and
log-sum-exp, which is exactly the gradient of the softmax over the concatenated keys: the
probabilities it recomputes, exp(s - lse), are the joint ones. It uses torch's CPU flash
attention kernels, so it serves CPU float models; elsewhere the trainer keeps the copy.
"""
from __future__ import annotations

import contextvars
from contextlib import contextmanager

import torch

from rolecall.policies.attention import attention_as

NAME = "rolecall_shared_prefix"
_flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
_flash_backward = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward


def _fold(x_G: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """[G, H, T, ...] -> [1, h, G * (H / h) * T, ...]: the queries that read one key head, stacked."""
    G, H, T = x_G.shape[:3]
    rest = x_G.shape[3:]
    x = x_G.reshape(G, kv_heads, H // kv_heads, T, *rest).transpose(0, 1)
    return x.reshape(1, kv_heads, G * (H // kv_heads) * T, *rest)


def _unfold(x: torch.Tensor, G: int, H: int, T: int) -> torch.Tensor:
    """The inverse of `_fold`."""
    h = x.shape[1]
    rest = x.shape[3:]
    return x.reshape(h, G, H // h, T, *rest).transpose(0, 1).reshape(G, H, T, *rest)


def _rows_of(prompt_of_B: torch.Tensor, n_prompts: int) -> list[torch.Tensor]:
    return [(prompt_of_B == u).nonzero().squeeze(1) for u in range(n_prompts)]


class PrefixAttention(torch.autograd.Function):
    """softmax attention of q_B to [its prompt's keys k_U[prompt_of_B], its own keys k_B (causal)]."""

    @staticmethod
    def forward(ctx, q_B, k_B, v_B, k_U, v_U, prompt_of_B, n_prompt_U, scale):
        B, H, T, _ = q_B.shape
        h, Wp = k_U.shape[1], k_U.shape[2]
        rows_U = _rows_of(prompt_of_B, k_U.shape[0])
        starts = [Wp - int(n) for n in n_prompt_U.tolist()]  # left padding: the real tokens end the row
        o1 = torch.empty_like(q_B)
        lse1 = q_B.new_empty((B, H, T), dtype=torch.float32)
        for u, rows in enumerate(rows_U):
            if rows.numel() == 0:
                continue
            o, lse = _flash(_fold(q_B[rows], h), k_U[u:u + 1, :, starts[u]:], v_U[u:u + 1, :, starts[u]:],
                            0.0, False, scale=scale)
            o1[rows] = _unfold(o, len(rows), H, T).to(o1.dtype)
            lse1[rows] = _unfold(lse, len(rows), H, T)
        g = H // h
        k_rep, v_rep = k_B.repeat_interleave(g, 1), v_B.repeat_interleave(g, 1)
        o2, lse2 = _flash(q_B, k_rep, v_rep, 0.0, True, scale=scale)
        lse = torch.logaddexp(lse1, lse2)
        out = o1 * (lse1 - lse).exp().unsqueeze(-1).to(o1.dtype) + o2 * (lse2 - lse).exp().unsqueeze(-1).to(o2.dtype)
        ctx.save_for_backward(q_B, k_rep, v_rep, k_U, v_U, out, lse, prompt_of_B)
        ctx.starts, ctx.scale, ctx.rows_U = starts, scale, rows_U
        return out

    @staticmethod
    def backward(ctx, d_out):
        q_B, k_rep, v_rep, k_U, v_U, out, lse, _ = ctx.saved_tensors
        B, H, T, d = q_B.shape
        h = k_U.shape[1]
        d_out = d_out.contiguous()
        dq, dk_rep, dv_rep = _flash_backward(d_out, q_B, k_rep, v_rep, out, lse, 0.0, True, scale=ctx.scale)
        dq = dq.clone()
        dk_B = dk_rep.reshape(B, h, H // h, T, d).sum(2)
        dv_B = dv_rep.reshape(B, h, H // h, T, d).sum(2)
        dk_U, dv_U = torch.zeros_like(k_U), torch.zeros_like(v_U)
        for u, rows in enumerate(ctx.rows_U):
            if rows.numel() == 0:
                continue
            s, G = ctx.starts[u], len(rows)
            dq_u, dk_u, dv_u = _flash_backward(_fold(d_out[rows], h), _fold(q_B[rows], h), k_U[u:u + 1, :, s:],
                                               v_U[u:u + 1, :, s:], _fold(out[rows], h), _fold(lse[rows], h),
                                               0.0, False, scale=ctx.scale)
            dq[rows] += _unfold(dq_u, G, H, T)
            dk_U[u:u + 1, :, s:] = dk_u
            dv_U[u:u + 1, :, s:] = dv_u
        return dq, dk_B, dv_B, dk_U, dv_U, None, None, None


# --- the transformers side: an attention function reading the prompt from a context ------

_PREFIX: contextvars.ContextVar = contextvars.ContextVar("rolecall_prefix", default=None)


def _attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers attention interface: query [B, H, T, d], key/value [B, h, T, d] (the rows' own)."""
    prefix = _PREFIX.get()
    if prefix is None:
        raise RuntimeError(f"attention {NAME!r} runs only inside shared_prefix.attending()")
    layer = prefix["cache"].layers[module.layer_idx]
    out = PrefixAttention.apply(query, key, value, layer.keys, layer.values, prefix["prompt_of_B"],
                                prefix["n_prompt_U"], scaling if scaling is not None else query.shape[-1] ** -0.5)
    return out.transpose(1, 2).contiguous(), None


def usable(model, device: torch.device) -> bool:
    """The split attention serves this model: CPU, full attention in every layer (no sliding
    window), a float dtype the CPU flash kernels take, and a DynamicCache-style layer list."""
    cfg = getattr(model, "config", None)
    if device.type != "cpu" or cfg is None:
        return False
    if any(t != "full_attention" for t in getattr(cfg, "layer_types", None) or ["full_attention"]):
        return False
    if getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", False):
        return False
    return getattr(cfg, "_attn_implementation", None) in ("sdpa", "eager", NAME)


@contextmanager
def attending(model, cache, prompt_of_B: torch.Tensor, n_prompt_U: torch.Tensor):
    """Within: the model's attention reads the prompt keys of `cache` (one layer list, [U, h, Wp, d]
    left-padded, `n_prompt_U` real tokens each) for row b's prompt `prompt_of_B[b]`. The model is
    called with the yielded value as `attention_mask` (no masks: the split attention needs none)
    and no cache."""
    token = _PREFIX.set({"cache": cache, "prompt_of_B": prompt_of_B, "n_prompt_U": n_prompt_U})
    try:
        with attention_as(model, NAME, _attention):
            yield {t: None for t in (getattr(model.config, "layer_types", None) or ["full_attention"])}
    finally:
        _PREFIX.reset(token)
