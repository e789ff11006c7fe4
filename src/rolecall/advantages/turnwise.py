"""Turn-wise advantage (AT-GRPO): z-score within each (problem, turn index, role) group.

From "Stronger-MAS: Multi-Agent Reinforcement Learning for Collaborative LLMs" (AT-GRPO,
agent- and turn-wise grouping): in a multi-turn, multi-agent episode the k-th turn of an agent is compared
only with the k-th turns of that agent in the other samples of the problem, so a revision
in round 3 is not measured against first drafts. The arithmetic is GRPO's; only the
default grouping key differs (`group_by: turn`).
"""
from __future__ import annotations

from dataclasses import dataclass

from rolecall.advantages.grpo import GRPO


@dataclass(frozen=True)
class TurnWise(GRPO):
    name: str = "turnwise"
    default_group_by: str = "turn"
