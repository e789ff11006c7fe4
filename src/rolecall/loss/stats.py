"""Per-token log-probabilities and the off-policy / perplexity diagnostics built on them."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

_LOG_RATIO_CLAMP = 20.0


# Elements of one block of rows of `_TemperedLogprob`: small enough that a block's tempered
# logits, probabilities and their products stay in the core's cache (1 MB of float32).
_BLOCK_ELEMENTS = 1 << 18


class _TemperedLogprob(torch.autograd.Function):
    """log p(target) under softmax(logits / T) and the entropy of that distribution (returned
    without a gradient), a block of rows at a time.

    The plain form materializes the tempered logits, their log-softmax, its exp and the
    product for the entropy, each as large as the logits ([tokens, vocabulary]), and keeps
    the log-softmax for the backward: on a 49,152-token vocabulary those passes over memory
    took about a fifth of a CPU training step (SmolLM2, benchmarks/real_speed.py). Here
    each block's passes run while the block is in cache; only the log-sum-exp per row is
    kept, and the backward recomputes a block's probabilities: d logp(y) / d z = onehot(y) - p,
    divided by T for the logits.
    """

    @staticmethod
    def forward(ctx, logits_N_V: Tensor, targets_N: Tensor, temperature: float, entropy: bool = True
                ) -> tuple[Tensor, Tensor]:
        n, v = logits_N_V.shape
        rows = max(1, _BLOCK_ELEMENTS // max(v, 1))
        logp_N = logits_N_V.new_empty(n, dtype=torch.float32)
        ent_N, lse_N = torch.empty_like(logp_N), torch.empty_like(logp_N)
        t_N1 = targets_N.long().unsqueeze(-1)
        for i in range(0, n, rows):
            z = logits_N_V[i:i + rows].float() / temperature
            lse = torch.logsumexp(z, -1, keepdim=True)
            z.sub_(lse)  # now log p
            logp_N[i:i + rows] = z.gather(-1, t_N1[i:i + rows]).squeeze(-1)
            if entropy:  # the reference pass needs no entropy: skip its exp and product
                ent_N[i:i + rows] = -(z.exp() * z).sum(-1)
            lse_N[i:i + rows] = lse.squeeze(-1)
        ctx.save_for_backward(logits_N_V, t_N1, lse_N)
        ctx.temperature = temperature
        ctx.mark_non_differentiable(ent_N)
        return logp_N, ent_N

    @staticmethod
    def backward(ctx, g_logp_N: Tensor, _g_ent_N: Tensor):
        logits_N_V, t_N1, lse_N = ctx.saved_tensors
        T = ctx.temperature
        n, v = logits_N_V.shape
        rows = max(1, _BLOCK_ELEMENTS // max(v, 1))
        grad = torch.empty_like(logits_N_V)
        g_N1 = g_logp_N.float().unsqueeze(-1)
        for i in range(0, n, rows):
            p = (logits_N_V[i:i + rows].float() / T).sub_(lse_N[i:i + rows].unsqueeze(-1)).exp_()
            g = p.mul_(-g_N1[i:i + rows]).scatter_add_(-1, t_N1[i:i + rows], g_N1[i:i + rows])
            grad[i:i + rows] = g.div_(T)
        return grad, None, None, None


def token_logprobs_and_entropy(
    logits_B_T_V: Tensor, targets_B_T: Tensor, temperature: float = 1.0, *, entropy_grad: bool = True
) -> tuple[Tensor, Tensor]:
    """Log-prob of each target token and the entropy of the same tempered distribution.

    Logits are divided by the sampling temperature so logps match what the rollout
    engine sampled from; computed in float32 because bf16 log_softmax is too coarse
    for importance ratios. `entropy_grad=False` (the entropy is only watched, not in the
    loss) computes both a block of rows at a time (`_TemperedLogprob`): the same values,
    without the vocabulary-sized intermediates.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    if not entropy_grad:
        *lead, v = logits_B_T_V.shape
        logp_N, ent_N = _TemperedLogprob.apply(logits_B_T_V.reshape(-1, v), targets_B_T.reshape(-1), temperature)
        return logp_N.view(*lead), ent_N.view(*lead)
    logp_B_T_V = F.log_softmax(logits_B_T_V.float() / temperature, dim=-1)
    logp_B_T = logp_B_T_V.gather(-1, targets_B_T.long().unsqueeze(-1)).squeeze(-1)
    entropy_B_T = -(logp_B_T_V.exp() * logp_B_T_V).sum(dim=-1)
    return logp_B_T, entropy_B_T


def token_logprobs(logits_B_T_V: Tensor, targets_B_T: Tensor, temperature: float = 1.0) -> Tensor:
    """Log-prob of each target token only, a block of rows at a time (`_TemperedLogprob`)."""
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    *lead, v = logits_B_T_V.shape
    return _TemperedLogprob.apply(logits_B_T_V.reshape(-1, v), targets_B_T.reshape(-1), temperature,
                                  False)[0].view(*lead)


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
