"""One object per run that scores final answers in batches: a built-in verifier (one file each in
`rolecall.rewards.verifiers`, found there) or a user's function (`package.module:function`).

The trainer sees only `score_many(completions, problems) -> list[Score]`; which gold field a
verifier reads (`answer`, `meta["answers"]`, `meta["tests"]`) is its own business.
"""
from __future__ import annotations

import functools
import math

from rolecall.registry import declared, discover
from rolecall.rewards.base import Verifier, VerifierSpec
from rolecall.rewards.custom import CustomVerifier
from rolecall.rewards.verifiers.code import CodeVerifier
from rolecall.rewards.verifiers.math import MathVerifier
from rolecall.rewards.verifiers.qa import QAVerifier

__all__ = ["CodeVerifier", "MathVerifier", "QAVerifier", "Verifier", "answer_from_readers", "as_check", "build_verifier",
           "verifier_names"]


@functools.cache
def _registry() -> dict[str, VerifierSpec]:
    return {spec.name: spec for spec in discover("rolecall.rewards.verifiers", declared("VERIFIER", VerifierSpec))}


def verifier_names() -> list[str]:
    """The built-in verifiers `reward.name` may name (besides a user's `package.module:function`)."""
    return sorted(_registry())


def answer_from_readers() -> list[str]:
    """The built-in verifiers that read `reward.answer_from` (the others ignore it, so it stays `boxed`)."""
    return sorted(name for name, spec in _registry().items() if spec.reads_answer_from)


def build_verifier(cfg) -> Verifier:
    """From a `RewardCfg` (duck-typed so rewards never import the config module)."""
    if cfg.name in _registry():
        return _registry()[cfg.name].build(cfg)
    if ":" in cfg.name:
        return CustomVerifier(cfg.name, getattr(cfg, "custom_deadline_s", 10.0), workers=getattr(cfg, "custom_workers", 4),
                              max_abs=getattr(cfg, "custom_max_abs", 1e6))
    raise ValueError(f"reward.name: unknown {cfg.name!r}; allowed: {', '.join(verifier_names())} "
                     "or package.module:function")


def as_check(verifier: Verifier):
    """`team.check` for a rollout: the verifier's values now, None where unscorable or non-finite."""
    def check(texts, problems) -> list[float | None]:
        return [None if s.value is None or not math.isfinite(s.value) else s.value
                for s in verifier.score_many(list(texts), list(problems))]
    return check
