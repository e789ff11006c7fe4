"""RLOO advantage: each reward minus the mean of the *other* rewards of its group.

From "Buy 4 REINFORCE Samples, Get a Baseline for Free!" (Kool et al., 2019) and "Back to
Basics: Revisiting REINFORCE Style Optimization for Learning from Human Feedback in LLMs"
(Ahmadian et al., 2024): A_i = r_i - (sum_j r_j - r_i) / (K - 1) = K / (K - 1) (r_i - mean),
an unbiased baseline since it does not depend on sample i. A constant group gets 0.
"""
from __future__ import annotations

from dataclasses import dataclass

from rolecall.advantages.base import GroupShaped


@dataclass(frozen=True)
class RLOO(GroupShaped):
    name: str = "rloo"

    def shape(self, values: list[float]) -> list[float]:
        total, k = sum(values), len(values)
        return [r - (total - r) / (k - 1) for r in values]
