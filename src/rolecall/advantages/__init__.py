"""Registry of advantage estimators, looked up by the name used in configs."""
from __future__ import annotations

from rolecall.advantages.agentwise import AgentWise
from rolecall.advantages.base import Estimator, group_normalize
from rolecall.advantages.grpo import GRPO

ESTIMATORS: dict[str, Estimator] = {est.name: est for est in (GRPO(), AgentWise())}


def get_estimator(name: str) -> Estimator:
    """The registered estimator called `name`; a typo fails here, not mid-training."""
    try:
        return ESTIMATORS[name]
    except KeyError:
        raise ValueError(f"unknown advantage estimator {name!r}; allowed: {sorted(ESTIMATORS)}") from None


__all__ = ["ESTIMATORS", "Estimator", "AgentWise", "GRPO", "get_estimator", "group_normalize"]
