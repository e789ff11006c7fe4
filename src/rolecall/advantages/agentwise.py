"""Agent-wise advantage (Dr. MAS): z-score within each (problem, role) group.

All slots played by one role (three parallel `solver*` slots, say) share one mean and
std, so each agent's gradient scale is set by its own reward distribution. The arithmetic
is GRPO's; only the default grouping key differs.
"""
from __future__ import annotations

from dataclasses import dataclass

from rolecall.advantages.grpo import GRPO, compute

__all__ = ["AgentWise", "compute"]


@dataclass(frozen=True)
class AgentWise(GRPO):
    """Registry entry for agent-wise normalisation; callers group by (problem uid, role)."""

    name: str = "agentwise"
    default_group_by: str = "role"
