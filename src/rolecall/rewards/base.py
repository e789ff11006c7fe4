"""What every verifier returns: a score, or an honest 'cannot score' (never a fake 0)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from rolecall.types import Problem

# Statuses a verifier may report. `unscorable` means the *verifier* failed (crash, its own
# deadline, a bad gold answer): the sample is excluded from group statistics, never scored 0.
# `pathological` (math, reasoning_gym) means the *answer* broke the judge (overran its deadline, crashed it)
# while the judge is healthy on the gold answer: scored 0 like a wrong answer, so breaking
# the judge is no escape from a negative advantage.
# A user's reward function (`rolecall.rewards.custom`) could not score a sample, value None:
# `timeout` (overran reward.custom_deadline_s), `raised`, `crashed` (its process died) or
# `bad_value` (not a finite number within reward.custom_max_abs). For the code verifier,
# `timeout` is instead the program's verdict, scored like a wrong answer.
STATUSES = ("ok", "wrong", "no_answer", "timeout", "memory_limit", "runtime_error",
            "output_limit", "pathological", "unscorable", "raised", "crashed", "bad_value")


@dataclass(frozen=True)
class Score:
    """A verifier's verdict; `value` is None only when the sample cannot be scored."""

    value: float | None
    status: str
    # What was graded and how, for debugging rewards; not part of the verdict's identity.
    extracted: str | None = field(default=None, compare=False)
    info: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def scorable(self) -> bool:
        return self.value is not None

    def to_json(self) -> dict[str, Any]:
        """The stable shape `rolecall verify ...` prints: score, status, extracted, then details."""
        return {"score": self.value, "status": self.status, "extracted": self.extracted, **self.info}


class Verifier(Protocol):
    """What the trainer sees of a verifier: scores in batches, and `close()` for its processes."""

    name: str

    def score_many(self, completions: list[str], problems: list[Problem]) -> list[Score]: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class VerifierSpec:
    """A built-in verifier, declared by its module (`VERIFIER = VerifierSpec(...)`) in
    `rolecall.rewards.verifiers`: `reward.name=<name>` selects it, `build(reward_cfg)` makes it.
    `reads_answer_from`: it takes the answer as `reward.answer_from` says (`rolecall.parsing.final_answer`);
    the config refuses a fallback for a verifier that would ignore it."""

    name: str
    build: Callable[[Any], Verifier]
    reads_answer_from: bool = False
