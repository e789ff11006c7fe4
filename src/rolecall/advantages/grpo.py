"""GRPO advantage: z-score of each turn's reward within its (problem, slot) group."""
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
    """GRPO advantages for turns grouped by `group_ids_N`.

    Callers build ids as (problem uid, slot) so that each call site of a workflow
    (e.g. `solver0` vs `judge`) is compared only with its own G samples.
    """
    return group_normalize(rewards_N, group_ids_N, eps=eps)


@dataclass(frozen=True)
class GRPO:
    """`eps` must be > 0: it keeps a group whose rewards barely differ from exploding."""
    """Registry entry for GRPO; `eps` is the std floor used in the denominator."""

    name: str = "grpo"
    default_group_by: str = "slot"
    eps: float = DEFAULT_EPS

    def __post_init__(self) -> None:
        if not self.eps > 0:
            raise ValueError(f"algo.estimator_options.eps: must be > 0, got {self.eps!r}")

    def compute(
        self, rewards_N: Sequence[float | None], group_ids_N: Sequence[Hashable]
    ) -> tuple[list[float], dict[str, float]]:
        return compute(rewards_N, group_ids_N, eps=self.eps)
