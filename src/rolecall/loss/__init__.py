"""Policy losses and the token statistics the trainer logs alongside them."""
from __future__ import annotations

from rolecall.loss.ppo import AGG_MODES, agg_norm, aggregate, pg_per_token, ppo_clip_loss
from rolecall.loss.regularizers import coherence_scale, kl_to_ref_per_token
from rolecall.loss.stats import chi2_token, token_logprobs, token_logprobs_and_entropy, training_ppl

__all__ = [
    "AGG_MODES",
    "agg_norm",
    "aggregate",
    "coherence_scale",
    "kl_to_ref_per_token",
    "pg_per_token",
    "chi2_token",
    "ppo_clip_loss",
    "token_logprobs",
    "token_logprobs_and_entropy",
    "training_ppl",
]
