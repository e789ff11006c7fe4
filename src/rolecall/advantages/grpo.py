"""GRPO advantage: z-score of each turn's reward within its (problem, slot) group."""
from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from rolecall.advantages.base import DEFAULT_EPS, GroupShaped, group_normalize, positive_option, zscore


def compute(
    rewards_N: Sequence[float | None],
    group_ids_N: Sequence[Hashable],
    *,
    eps: float = DEFAULT_EPS,
) -> tuple[list[float], dict[str, float]]:
    """GRPO advantages for turns grouped by `group_ids_N`.

    Callers build ids as (problem uid, slot) so that each call site of a workflow
    (e.g. `solver0` vs `judge`) is compared only with its own G samples.
    """
    return group_normalize(rewards_N, group_ids_N, eps=eps)


@dataclass(frozen=True)
class GRPO(GroupShaped):
    """Registry entry for GRPO; `eps` (> 0) is the std floor in the denominator, which keeps a
    group whose rewards barely differ from exploding."""

    name: str = "grpo"
    eps: float = DEFAULT_EPS

    def __post_init__(self) -> None:
        positive_option("eps", self.eps)

    def shape(self, values: list[float]) -> list[float]:
        return zscore(values, self.eps)
