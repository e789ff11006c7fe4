"""Per-token log-probabilities and the off-policy / perplexity diagnostics built on them."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

_LOG_RATIO_CLAMP = 20.0


def token_logprobs_and_entropy(
    logits_B_T_V: Tensor, targets_B_T: Tensor, temperature: float = 1.0
) -> tuple[Tensor, Tensor]:
    """Log-prob of each target token and the entropy of the same tempered distribution.

    Logits are divided by the sampling temperature so logps match what the rollout
    engine sampled from; computed in float32 because bf16 log_softmax is too coarse
    for importance ratios.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    logp_B_T_V = F.log_softmax(logits_B_T_V.float() / temperature, dim=-1)
    logp_B_T = logp_B_T_V.gather(-1, targets_B_T.long().unsqueeze(-1)).squeeze(-1)
    entropy_B_T = -(logp_B_T_V.exp() * logp_B_T_V).sum(dim=-1)
    return logp_B_T, entropy_B_T


def token_logprobs(logits_B_T_V: Tensor, targets_B_T: Tensor, temperature: float = 1.0) -> Tensor:
    """Log-prob of each target token only (no entropy: half the memory for a big vocabulary)."""
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    logp_B_T_V = F.log_softmax(logits_B_T_V.float() / temperature, dim=-1)
    return logp_B_T_V.gather(-1, targets_B_T.long().unsqueeze(-1)).squeeze(-1)


@torch.no_grad()
def chi2_token(logp_B_T: Tensor, rollout_logp_B_T: Tensor, mask_B_T: Tensor) -> float:
    """Token-level chi-square divergence E_mu[(pi/mu)^2] - 1 over masked tokens.

    Measures trainer/rollout-engine mismatch; NaN when there are no tokens, so an
    empty batch is never reported as "perfectly on-policy".
    """
    on = mask_B_T > 0
    n = int(on.sum())
    if n == 0:
        return math.nan
    log_ratio = (logp_B_T.float() - rollout_logp_B_T.float())[on]
    ratio = torch.exp(log_ratio.clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP))
    return float((ratio**2).mean()) - 1.0


@torch.no_grad()
def training_ppl(logp_B_T: Tensor, mask_B_T: Tensor) -> float:
    """Mean over sequences of exp(-mean token logp); empty sequences are skipped, NaN if all are."""
    mask = (mask_B_T > 0).float()
    n_tok_B = mask.sum(dim=-1)
    keep_B = n_tok_B > 0
    if not bool(keep_B.any()):
        return math.nan
    logp = torch.where(mask > 0, logp_B_T.float(), torch.zeros_like(mask))
    mean_logp_B = logp.sum(dim=-1)[keep_B] / n_tok_B[keep_B]
    return float(torch.exp(-mean_logp_B).mean())
