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


def pg_per_token(logp_B_T: Tensor, old_logp_B_T: Tensor, adv_B: Tensor, mask_B_T: Tensor, *, clip_low: float = 0.2,
                 clip_high: float = 0.28, dual_clip: float | None = 3.0) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The clipped surrogate per token, zero off the mask: (pg, ratio, clipped, dual-clip active).

    `ratio` is π/π_old per token (1 off the mask); `clipped` marks tokens where the clip
    bound, not the ratio, set the surrogate.

    pg = max(-A*r, -A*clip(r, 1-clip_low, 1+clip_high)); for A<0 also capped at -A*dual_clip
    so one very off-policy token cannot dominate. The loss and the logged per-role loss both
    come from here, so what is logged is what is optimized.
    """
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
    return pg * mask, ratio, (pg2 > pg1) & on, dual_active & on


def aggregate(x_B_T: Tensor, mask_B_T: Tensor, agg: str, norm: float | None = None) -> Tensor:
    """Reduce per-token values (zero off the mask) the way the loss is aggregated.

    token-mean: sum / tokens; seq-mean-token-mean: per-sequence token mean, summed over
    sequences / sequences; seq-mean-token-sum: per-sequence sum, summed / sequences. `norm`
    replaces this batch's own denominator (`agg_norm`) so micro-batches sum to the mini-batch.
    """
    _check_agg(agg)
    mask = mask_B_T.to(x_B_T.dtype)
    if agg == "token-mean":
        denom = norm if norm is not None else mask.sum().clamp(min=1.0)
        return (x_B_T * mask).sum() / denom
    per_seq_B = (x_B_T * mask).sum(dim=-1)
    if agg == "seq-mean-token-mean":
        per_seq_B = per_seq_B / mask.sum(dim=-1).clamp(min=1.0)  # empty rows: 0 / 1, not 0 / 0
    denom = norm if norm is not None else (mask.sum(dim=-1) > 0).sum().clamp(min=1).to(x_B_T.dtype)
    return per_seq_B.sum() / denom


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
    """Clipped surrogate loss (to minimise) for per-sequence advantages: `pg_per_token`
    reduced by `aggregate`. `norm` overrides this batch's own denominator (see `agg_norm`)
    for gradient accumulation.
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
    pg, ratio, clipped, dual_active = pg_per_token(logp_B_T, old_logp_B_T, adv_B, mask_B_T, clip_low=clip_low,
                                                   clip_high=clip_high, dual_clip=dual_clip)
    loss = aggregate(pg, mask, agg, norm)

    with torch.no_grad():
        n_tok = max(float(mask.sum()), 1.0)
        metrics = {
            "clip_frac": float(clipped.sum()) / n_tok,
            "ratio_mean": float((ratio * mask).sum()) / n_tok,
            "dual_clip_frac": float(dual_active.sum()) / n_tok,
            "pg_loss": float(loss.detach()),
        }
    return loss, metrics
