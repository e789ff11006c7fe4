"""The rule deliberators: fixed actions, random actions and the oracle (plain Python, no torch).

They are meta-policies without weights: the `deliberation` workflow plays them by name
(`workflow.options.deliberator`), and the meta-policy's training stages use them to collect
states (random), to label them (the oracle's rule), and as baselines (fixed, oracle). A
deliberator chooses every agent's action for one round: `await decide(problem, team, round_,
table)` -> one index into `ACTIONS` per agent.
"""
from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence

from rolecall.metapolicy.state import ACTIONS, CONCEDE, PERSIST, REFINE


class FixedDeliberator:
    def __init__(self, action: int) -> None:
        self.action = action

    async def decide(self, problem, team, round_, table) -> list[int]:
        return [self.action] * len(table.texts)


class RandomDeliberator:
    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)

    async def decide(self, problem, team, round_, table) -> list[int]:
        return [self.rng.randrange(len(ACTIONS)) for _ in table.texts]


def oracle_actions(correct: Sequence[bool]) -> list[int]:
    """The oracle's labels: PERSIST when right, else CONCEDE when a peer is right, else REFINE."""
    return [PERSIST if c else CONCEDE if any(correct[:i] + correct[i + 1:]) else REFINE
            for i, c in enumerate(correct)]


class OracleDeliberator:
    """Knows which answers are right through the run's verifier (`team.check`)."""

    async def decide(self, problem, team, round_, table) -> list[int]:
        scores = await asyncio.gather(*(team.check(t) for t in table.texts))
        return oracle_actions([s is not None and s >= 0.5 for s in scores])
