"""A reward function of your own: partial credit for near misses on arithmetic.

    rolecall train reward.name=examples.closeness_reward:closeness      # from the repository root

rolecall calls it in a separate process, once per answer to grade, with the problem
(`problem.prompt`, `problem.answer`, `problem.meta`) and the workflow's final answer text.
It returns a number, or None when it cannot score (the sample is then left out of the
advantage statistics and counted as unscorable, never treated as 0). A call that raises,
hangs past `reward.custom_deadline_s` or kills its process is unscorable too.
"""
from __future__ import annotations

from rolecall.parsing import last_boxed
from rolecall.types import Problem


def closeness(problem: Problem, answer: str) -> float | None:
    """1 for the exact answer, 0.5 when off by one, 0 otherwise or without a \\boxed{} number."""
    try:
        gold = int(problem.answer)
    except ValueError:
        return None  # not an integer task: say so instead of guessing
    said = last_boxed(answer)
    if said is None or not said.strip().lstrip("-").isdigit():
        return 0.0
    miss = abs(int(said) - gold)
    return 1.0 if miss == 0 else 0.5 if miss == 1 else 0.0


class Strict:
    """The same idea as a class: made once per run, then called for every answer."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, problem: Problem, answer: str) -> float | None:
        self.calls += 1
        return 1.0 if last_boxed(answer) == problem.answer else 0.0
