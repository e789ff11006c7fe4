"""Built-in procedural arithmetic: seeded problems, a fixed train/validation split, gold answers.

`digits` is the difficulty knob (operand size); `ops` picks + and/or -. Subtraction keeps
results non-negative. The split is a seeded shuffle of the whole problem space, so the
validation problems never appear in training and stay the same across runs.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cached_property

from rolecall.tasks.source import TaskSource
from rolecall.types import Problem


@dataclass(frozen=True)
class ArithmeticTask:
    digits: int = 2
    ops: str = "+-"
    n_val: int = 200
    seed: int = 1234

    def __post_init__(self) -> None:
        # The whole problem space is materialised and shuffled: 3 digits is 1.2M problems,
        # 4 digits would be 121M (tens of GB), so the knob stops at 3.
        if not 1 <= self.digits <= 3:
            raise ValueError(f"task.digits must be in 1..3, got {self.digits}")
        if not self.ops or set(self.ops) - set("+-"):
            raise ValueError(f"task.ops must be a non-empty mix of '+' and '-', got {self.ops!r}")
        if self.n_val < 1:
            raise ValueError(f"task.n_val must be >= 1, got {self.n_val}")

    @cached_property
    def _space(self) -> list[tuple[int, str, int]]:
        lo, hi = 10 ** (self.digits - 1) if self.digits > 1 else 0, 10 ** self.digits - 1
        triples = [(a, op, b) for op in self.ops for a in range(lo, hi + 1) for b in range(lo, hi + 1)
                   if op == "+" or a >= b]
        random.Random(self.seed).shuffle(triples)
        if len(triples) <= self.n_val:
            raise ValueError(f"task.n_val={self.n_val} leaves no training problems (space {len(triples)})")
        return triples

    @staticmethod
    def make(a: int, op: str, b: int) -> Problem:
        ans = a + b if op == "+" else a - b
        return Problem(uid=f"{a}{op}{b}", prompt=f"{a}{op}{b}", answer=str(ans))

    def validation(self) -> list[Problem]:
        return [self.make(*t) for t in self._space[: self.n_val]]

    def train(self) -> list[Problem]:
        return [self.make(*t) for t in self._space[self.n_val:]]


def _problems(cfg, count_tokens=None, log=print):
    t = cfg.task
    task = ArithmeticTask(digits=t.digits, ops=t.ops, n_val=t.n_val, seed=t.seed)
    return task.train(), task.validation()


def _identity(cfg) -> dict:
    t = cfg.task
    return {"path": "built-in", "task": f"arithmetic digits={t.digits} ops={t.ops} n_val={t.n_val} seed={t.seed}"}


# Exact match only: math-verify would call an echoed question (`12+34`) equivalent to its sum.
TASK = TaskSource("arithmetic", _problems, _identity,
                  reward="math", math_checker="strict")
