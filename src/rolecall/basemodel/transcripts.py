"""Synthetic role transcripts for pretraining the embedded model: a noisy oracle plays every role.

The real workflows run against `OracleEngine`, so every transcript has exactly the prompt
and conversation shape training will see. The oracle is deliberately imperfect at set
rates (wrong answers, noisy verdicts, poor selections) so that RL has headroom.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass

from rolecall.engines.base import GenOutput, GenRequest
from rolecall.parsing import last_boxed

_EXPR = re.compile(r"(\d+)([+-])(\d+)")
_LISTED = re.compile(r"^(\d+): (.*)$", re.MULTILINE)
_SOLUTION = re.compile(r"[Ss]olution: (.*)")
# Short on purpose: every character is a token the tiny model must learn to write.
STRATEGIES = ("Ones, then tens.", "Split into tens.", "Round to a ten.", "Count on.", "Left digit first.",
              "Check by inverse.")
CRITIQUES_BAD = ("Recheck the ones.", "Fix the carry.", "Redo the tens.")
CRITIQUES_GOOD = ("Checks out.", "Digits right.")


@dataclass(frozen=True)
class OracleRates:
    """How often each role does its job right (the rest is plausible noise)."""

    solve: float = 0.6  # generator / worker / revision gives the right answer
    select: float = 0.4  # aggregator / synthesizer picks a right candidate when one exists
    judge: float = 0.7  # evaluator verdict matches the truth


def _truth(text: str) -> int:
    a, op, b = _EXPR.search(text).groups()
    return int(a) + int(b) if op == "+" else int(a) - int(b)


def wrong_answer(ans: int, rng: random.Random) -> int:
    """The oracle's wrong answer: `ans` moved by a small or a tens-digit slip (absolute value taken)."""
    delta = rng.choice((1, -1, 2, -2, 10, -10, 11, -9))
    return abs(ans + delta) if ans + delta != ans else ans + 1


class OracleEngine:
    """Plays the role named by the request's policy (route roles to themselves)."""

    def __init__(self, rates: OracleRates, rng: random.Random, render) -> None:
        self.rates, self.rng, self.render = rates, rng, render
        self.examples: list[tuple[str, str]] = []  # (rendered prompt, completion)

    def _answer(self, truth: int) -> str:
        ok = self.rng.random() < self.rates.solve
        return f"\\boxed{{{truth if ok else wrong_answer(truth, self.rng)}}}"

    def _select(self, truth: int, listed: str) -> int:
        boxes = [last_boxed(c) for _, c in _LISTED.findall(listed)]
        right = [i + 1 for i, b in enumerate(boxes) if b == str(truth)]
        if right and self.rng.random() < self.rates.select:
            return self.rng.choice(right)
        return self.rng.randint(1, max(1, len(boxes)))

    def reply(self, req: GenRequest) -> str:
        role, text = req.policy, req.messages[-1]["content"]
        truth = _truth(req.messages[0]["content"])
        if role == "debater" and _LISTED.search(text):  # a later round: pick among the listed answers
            role = "synthesizer"
        if role in ("generator", "worker", "refiner", "debater"):
            return self._answer(truth)
        if role in ("evaluator", "verifier", "scorer"):
            # The judged solution follows "Solution:" (first review) or "Revised solution:" (follow-up).
            said = last_boxed(_SOLUTION.search(text).group(1))
            right = (said == str(truth)) == (self.rng.random() < self.rates.judge)
            verdict = "Correct" if right else "Incorrect"
            why = self.rng.choice(CRITIQUES_GOOD if right else CRITIQUES_BAD)
            return f"\\boxed{{{verdict}}} {why}"
        if role == "aggregator":
            return f"\\boxed{{{self._select(truth, text)}}}"
        if role == "synthesizer":
            k = self._select(truth, text)
            listed = [last_boxed(c) for _, c in _LISTED.findall(text)]
            # The pick's answer only: a listed line may carry a peer's score note after it.
            return f"\\boxed{{{listed[k - 1]}}}" if k <= len(listed) and listed[k - 1] else self._answer(truth)
        if role == "orchestrator":
            n = int(re.search(r"List (\d+)", text).group(1))
            picks = self.rng.sample(STRATEGIES, min(n, len(STRATEGIES)))
            return "\n".join(f"{i + 1}. {s}" for i, s in enumerate(picks))
        raise ValueError(f"oracle: no script for role {role!r}")

    def generate(self, requests: list[GenRequest], *, temperature: float) -> list[GenOutput]:
        outs = []
        for r in requests:
            prompt, completion = self.render(r.messages), self.reply(r)
            self.examples.append((prompt, completion))
            outs.append(GenOutput(prompt_text=prompt, completion_text=completion))
        return outs
