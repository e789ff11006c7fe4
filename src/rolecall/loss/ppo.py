"""PPO clipped policy-gradient loss with dual clip and micro-batch-safe aggregation."""
from __future__ import annotations

import torch
from torch import Tensor

AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")

# exp(20) ~ 5e8: keeps ratio finite so a stale or masked token cannot turn into inf/NaN grads.
_LOG_RATIO_CLAMP = 20.0


def _check_agg(agg: str) -> None:
    if agg not in AGG_MODES:
        raise ValueError(f"unknown agg {agg!r}; allowed: {list(AGG_MODES)}")


def agg_norm(mask_B_T: Tensor, agg: str) -> float:
    """The denominator `ppo_clip_loss` uses when `norm` is None.

    token-mean -> number of mask tokens; seq modes -> number of sequences with at least
    one mask token (fully masked rows are padding, not samples). Sum this over all
    micro-batches of a mini-batch and pass it as `norm` to get the big-batch gradient.
    """
    _check_agg(agg)
    mask = mask_B_T.float()
    if agg == "token-mean":
        return float(mask.sum())
    return float((mask.sum(dim=-1) > 0).sum())


def ppo_clip_loss(
    logp_B_T: Tensor,
    old_logp_B_T: Tensor,
    adv_B: Tensor,
    mask_B_T: Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    dual_clip: float | None = 3.0,
    agg: str = "seq-mean-token-mean",
    norm: float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Clipped surrogate loss (to minimise) for per-sequence advantages.

    pg = max(-A*r, -A*clip(r, 1-clip_low, 1+clip_high)); for A<0 also capped at
    -A*dual_clip so one very off-policy token cannot dominate. `norm` overrides this
    batch's own denominator (see `agg_norm`) for gradient accumulation.
    """
    _check_agg(agg)
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1 (or None), got {dual_clip}")
    if norm is not None and norm <= 0:
        raise ValueError(f"norm must be positive, got {norm}")
    if logp_B_T.shape != old_logp_B_T.shape or logp_B_T.shape != mask_B_T.shape:
        raise ValueError(
            f"shape mismatch: logp {tuple(logp_B_T.shape)}, old_logp {tuple(old_logp_B_T.shape)}, "
            f"mask {tuple(mask_B_T.shape)}"
        )
    if adv_B.shape != logp_B_T.shape[:1]:
        raise ValueError(f"adv_B shape {tuple(adv_B.shape)} does not match batch size {logp_B_T.shape[0]}")

    mask = mask_B_T.to(logp_B_T.dtype)
    on = mask > 0
    adv = adv_B.detach().to(logp_B_T.dtype).unsqueeze(-1)  # B x 1, broadcast over tokens
    # Zero the log-ratio off-mask *before* exp: padding logps may be garbage or -inf,
    # and a where() after exp would still backprop 0*inf = NaN.
    log_ratio = torch.where(on, logp_B_T - old_logp_B_T.detach(), torch.zeros_like(logp_B_T))
    ratio = torch.exp(log_ratio.clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP))

    pg1 = -adv * ratio
    pg2 = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    pg = torch.maximum(pg1, pg2)
    if dual_clip is not None:
        pg3 = -adv * dual_clip
        dual_active = (adv < 0) & (pg > pg3)
        pg = torch.where(adv < 0, torch.minimum(pg, pg3), pg)
    else:
        dual_active = torch.zeros_like(on)
    pg = pg * mask

    if agg == "token-mean":
        denom = norm if norm is not None else mask.sum().clamp(min=1.0)
        loss = pg.sum() / denom
    else:
        per_seq_B = pg.sum(dim=-1)
        if agg == "seq-mean-token-mean":
            # Empty rows: 0 / 1 = 0 rather than 0 / 0 = NaN.
            per_seq_B = per_seq_B / mask.sum(dim=-1).clamp(min=1.0)
        denom = norm if norm is not None else (mask.sum(dim=-1) > 0).sum().clamp(min=1).to(pg.dtype)
        loss = per_seq_B.sum() / denom

    with torch.no_grad():
        n_tok = max(float(mask.sum()), 1.0)
        metrics = {
            "clip_frac": float(((pg2 > pg1) & on).sum()) / n_tok,
            "ratio_mean": float((ratio * mask).sum()) / n_tok,
            "dual_clip_frac": float((dual_active & on).sum()) / n_tok,
            "pg_loss": float(loss.detach()),
        }
    return loss, metrics
