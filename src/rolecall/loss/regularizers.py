"""The paper's optional interventions on the loss and the gradient: KL to the base model,
an entropy bonus, and the gradient-coherence scale. Pure tensor functions."""
from __future__ import annotations

import torch
from torch import Tensor

_LOG_RATIO_CLAMP = 20.0


def kl_to_ref_per_token(logp_B_T: Tensor, ref_logp_B_T: Tensor, mask_B_T: Tensor) -> Tensor:
    """KL(π‖ref) per token by the k3 estimator on tokens sampled from π, zero off the mask.

    k3 = exp(ref − logp) − (ref − logp) − 1 is >= 0 with low variance; its gradient with
    respect to logp is 1 − exp(ref − logp), which pulls π back toward the reference on
    every token where they differ. `ref` is the base model with every adapter off.
    """
    on = mask_B_T > 0
    d = torch.where(on, ref_logp_B_T.detach() - logp_B_T, torch.zeros_like(logp_B_T))
    d = d.clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    return (torch.exp(d) - d - 1.0) * mask_B_T.to(logp_B_T.dtype)


def coherence_scale(grad: Tensor, ema: Tensor | None, lam: float) -> tuple[float, float]:
    """(scale, cosine) of the gradient-coherence regularizer: 1 − λ·clamp(cos(g, EMA g), 0, 1).

    A gradient that keeps pointing where recent gradients pointed (as parallel same-role
    slots on one prompt push it) is shrunk; an orthogonal or opposite one is left alone.
    No history yet (or a zero vector) gives scale 1 and cosine NaN.
    """
    if ema is None:
        return 1.0, float("nan")
    denom = float(grad.norm()) * float(ema.norm())
    if denom == 0.0:
        return 1.0, float("nan")
    cos = float(grad @ ema) / denom
    return 1.0 - lam * min(max(cos, 0.0), 1.0), cos
