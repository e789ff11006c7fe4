"""Dr. GRPO advantage: the reward minus its group's mean, without dividing by the std.

From "Understanding R1-Zero-Like Training: A Critical Perspective" (Liu et al., 2025):
dividing by the group's std up-weights groups whose rewards barely differ (nearly all
right or all wrong), a difficulty bias; A = r - mean(group) keeps the reward's scale.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from rolecall.advantages.base import GroupShaped


@dataclass(frozen=True)
class DrGRPO(GroupShaped):
    name: str = "drgrpo"

    def shape(self, values: list[float]) -> list[float]:
        mean = statistics.fmean(values)
        return [r - mean for r in values]
