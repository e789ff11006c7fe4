"""Registry of advantage estimators, looked up by the name used in configs.

An estimator is one file in this folder defining a class with a `name` and
`compute(rewards, groups)` (`base.Estimator`); it is found there (`rolecall.registry.discover`).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from rolecall.advantages.agentwise import AgentWise
from rolecall.advantages.base import Estimator, group_normalize, grouped
from rolecall.advantages.drgrpo import DrGRPO
from rolecall.advantages.grpo import GRPO
from rolecall.advantages.rloo import RLOO
from rolecall.advantages.softrank import SoftRank
from rolecall.advantages.turnwise import TurnWise
from rolecall.registry import defined, discover

ESTIMATORS: dict[str, Estimator] = {cls.name: cls() for cls in discover(__name__, defined(object))
                                    if callable(getattr(cls, "compute", None))}
_FIXED = ("name", "default_group_by")  # what an estimator is, not how it is tuned


def estimator_options(name: str) -> dict[str, Any]:
    """The options `algo.estimator_options` may set for estimator `name`, with their defaults."""
    est = get_estimator(name)
    return {f.name: getattr(est, f.name) for f in dataclasses.fields(est) if f.name not in _FIXED}


def get_estimator(name: str, options: dict[str, Any] | None = None) -> Estimator:
    """The registered estimator called `name`, tuned by `options`; a typo, an unknown option or
    a bad value fails here (at config load), not mid-training."""
    try:
        est = ESTIMATORS[name]
    except KeyError:
        raise ValueError(f"unknown advantage estimator {name!r}; allowed: {sorted(ESTIMATORS)}") from None
    if not options:
        return est
    allowed = estimator_options(name)
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"algo.estimator_options: unknown option(s) {unknown} for {name!r}; "
                         f"allowed: {sorted(allowed) or 'none'}")
    for key, value in options.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"algo.estimator_options.{key}: must be a number, got {value!r}")
    return dataclasses.replace(est, **{k: float(v) for k, v in options.items()})


__all__ = ["ESTIMATORS", "Estimator", "AgentWise", "DrGRPO", "GRPO", "RLOO", "SoftRank", "TurnWise",
           "estimator_options", "get_estimator", "group_normalize", "grouped"]
