"""SoftRank advantage (SoftRankPO): the rank of each reward in its group, through a normal quantile.

From "Learning to Deliberate: Meta-policy Collaboration for Agentic LLMs with Multi-agent
Reinforcement Learning" (MPDF), eq. 2: for a group of K rewards,

    p_i = ((rank(R_i) + 1/2) / K) ** tau,   A*_i = Phi^-1(p_i),
    A_i = (A*_i - mean(A*)) / (std(A*) + eps)

with rank 0 for the lowest reward and tied rewards given the average of their ranks (so
equal rewards get equal advantages, and an all-equal group gets 0). Only the order of the
rewards matters: the advantages are unchanged by any reward rescaling a*R + b with a > 0,
they have zero mean, and for distinct rewards their variance lies within the paper's
Theorem 1 bounds, [1 - 1/(K-1), 1 + 1/(K-1)]. `tau` > 0 sharpens (> 1) or softens (< 1)
the contrast between high and low ranks; the paper's default is 0.5.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from rolecall.advantages.base import DEFAULT_EPS, GroupShaped, positive_option, zscore

_NORMAL = statistics.NormalDist()


def average_ranks(values: list[float]) -> list[float]:
    """0-based ascending ranks; tied values share the mean of the ranks they span."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for j in range(start, end + 1):
            ranks[order[j]] = (start + end) / 2
        start = end + 1
    return ranks


def softrank(values: list[float], tau: float = 0.5, eps: float = DEFAULT_EPS) -> list[float]:
    k = len(values)
    scores = [_NORMAL.inv_cdf(((r + 0.5) / k) ** tau) for r in average_ranks(values)]
    return zscore(scores, eps)


@dataclass(frozen=True)
class SoftRank(GroupShaped):
    name: str = "softrank"
    tau: float = 0.5
    eps: float = DEFAULT_EPS

    def __post_init__(self) -> None:
        positive_option("tau", self.tau)
        positive_option("eps", self.eps)

    def shape(self, values: list[float]) -> list[float]:
        return softrank(values, self.tau, self.eps)
