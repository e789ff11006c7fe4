"""Dr. GRPO advantage: the reward minus its group's mean, without dividing by the std.

From "Understanding R1-Zero-Like Training: A Critical Perspective" (Liu et al., 2025):
dividing by the group's std up-weights groups whose rewards barely differ (nearly all
right or all wrong), a difficulty bias; A = r - mean(group) keeps the reward's scale.
"""
from __future__ import annotations

import statistics
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from rolecall.advantages.base import grouped


def _centre(values: list[float]) -> list[float]:
    mean = statistics.fmean(values)
    return [r - mean for r in values]


@dataclass(frozen=True)
class DrGRPO:
    name: str = "drgrpo"
    default_group_by: str = "slot"

    def compute(self, rewards_N: Sequence[float | None], group_ids_N: Sequence[Hashable]) -> tuple[list[float], dict[str, float]]:
        return grouped(rewards_N, group_ids_N, _centre)
