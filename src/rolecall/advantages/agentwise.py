"""Agent-wise (Dr. MAS) advantage: z-score of each turn's reward within its (problem, role) group."""
from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from rolecall.advantages.base import DEFAULT_EPS, group_normalize


def compute(
    rewards_N: Sequence[float | None],
    group_ids_N: Sequence[Hashable],
    *,
    eps: float = DEFAULT_EPS,
) -> tuple[list[float], dict[str, float]]:
    """Agent-wise advantages for turns grouped by `group_ids_N`.

    Callers build ids as (problem uid, role): all slots played by one role (e.g. the
    three `generator*` slots of a voting workflow) share one mean and std, so each
    agent's gradient scale is set by its own reward distribution (Dr. MAS).
    The arithmetic is GRPO's; only the grouping key differs.
    """
    return group_normalize(rewards_N, group_ids_N, eps=eps)


@dataclass(frozen=True)
class AgentWise:
    """Registry entry for agent-wise normalisation; `eps` is the std floor."""

    name: str = "agentwise"
    default_group_by: str = "role"
    eps: float = DEFAULT_EPS

    def compute(
        self, rewards_N: Sequence[float | None], group_ids_N: Sequence[Hashable]
    ) -> tuple[list[float], dict[str, float]]:
        return compute(rewards_N, group_ids_N, eps=self.eps)
