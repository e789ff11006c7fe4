"""Plain data records that flow through rolecall: problem -> turns -> episode."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


Message = dict[str, str]  # one chat message: {"role": "user" | "assistant" | "system", "content": text}


@dataclass(frozen=True)
class Problem:
    """One dataset row: the text shown to the roles plus what the verifier needs."""

    uid: str
    prompt: str
    answer: str
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class Turn:
    """One LLM call inside an episode.

    `slot` is the call-site name that GRPO groups by (`generator0`, `worker`, ...);
    `role` is the role type that routing maps to a policy (`generator`, `worker`).
    Token fields are filled by the engine; text-only fakes may leave them empty.
    """

    role: str
    slot: str
    policy: str
    prompt_text: str
    completion_text: str
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = "stop"  # "stop" | "length"
    index: int = 0  # position of the turn inside its episode
    wave: int = -1  # which batched generate call served it; same role + same wave = parallel slots

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"


@dataclass(frozen=True)
class Demonstration:
    """One turn played right: what `role` is shown (`messages`) and what it should reply
    (`target`). A workflow that can write them (`Workflow.demonstrations`) lets a policy be
    warm-started on them before RL (`rolecall warm-start`)."""

    role: str
    messages: list[Message]
    target: str


class Reply(str):
    """What `Team.call` returns: the completion text, knowing which turn produced it
    (`turn` = that `Turn.index`), so a workflow can grade or reward that turn."""

    turn: int

    def __new__(cls, text: str, turn: int) -> "Reply":
        self = super().__new__(cls, text)
        self.turn = turn
        return self


NONFINITE = "nonfinite"  # `Episode.status` of an episode whose verifier returned NaN or Inf


@dataclass
class Episode:
    """All turns of one workflow run on one problem, plus the outcome.

    The typed fields below `group` are the contract between a workflow's episode and the
    trainer: what the episode queued for grading and which turns it rewarded on its own
    (set while it runs, through `Team`), whether it ran out of time (set by the rollout), and
    how the verifier judged it (set by scoring). `info` holds only the workflow's own
    free-form facts, for its own metrics and turn rewards.
    """

    problem: Problem
    sample: int  # index of this episode inside its group (0..G-1)
    turns: list[Turn] = field(default_factory=list)
    final_answer: str = ""
    reward: float | None = None  # None = unscorable (verifier failed), never silently 0
    info: dict[str, Any] = field(default_factory=dict)  # the workflow's own facts (e.g. fallbacks)
    group: int = 0  # which draw of the step it belongs to (a problem drawn twice is two groups)
    # Set while the episode runs (Team.grade, Team.reward) and by the rollout (its time budget):
    graded: dict[str, list[str]] = field(default_factory=dict)  # texts queued for the verifier, by name
    graded_turns: dict[str, list[int | None]] = field(default_factory=dict)  # the turn each graded text rewards
    set_rewards: dict[int, float | None] = field(default_factory=dict)  # turn index -> its own reward
    timed_out: bool = False  # cut at its wall-clock budget (rollout.episode_timeout_s)
    elapsed_s: float | None = None  # when it was cut
    # Set by scoring and credit:
    status: str | None = None  # the verifier's verdict class (ok, wrong, no_answer, unscorable, nonfinite, ...)
    verdict: dict[str, Any] = field(default_factory=dict)  # why the verifier decided so (failed test, overrun)
    nonfinite_reward: str | None = None  # the NaN/Inf the verifier returned (reward is then None)
    graded_rewards: dict[str, list[float | None]] = field(default_factory=dict)  # rewards of `graded`, by name
    turn_rewards: dict[int, float | None] = field(default_factory=dict)  # turns with their own reward

    def grades(self, name: str) -> list[float | None]:
        """Rewards of the texts graded under `name` (`Team.grade`), in the order they were
        queued; None = unscorable. Empty before scoring."""
        return list(self.graded_rewards.get(name, []))

    def facts(self) -> dict[str, Any]:
        """The contract's fields that are set, then the workflow's own `info`: the one dict that
        samples.jsonl and a custom reward function's episode view show."""
        out: dict[str, Any] = {}
        for name in ("graded", "graded_turns", "set_rewards", "timed_out", "elapsed_s", "status", "nonfinite_reward",
                     "verdict", "graded_rewards", "turn_rewards"):
            value = getattr(self, name)
            if value or (name == "status" and value is not None):
                out[name] = value
        return {**out, **self.info}
