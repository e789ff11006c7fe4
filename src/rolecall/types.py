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


class Reply(str):
    """What `Team.call` returns: the completion text, knowing which turn produced it
    (`turn` = that `Turn.index`), so a workflow can grade or reward that turn."""

    turn: int

    def __new__(cls, text: str, turn: int) -> "Reply":
        self = super().__new__(cls, text)
        self.turn = turn
        return self


@dataclass
class Episode:
    """All turns of one workflow run on one problem, plus the outcome."""

    problem: Problem
    sample: int  # index of this episode inside its group (0..G-1)
    turns: list[Turn] = field(default_factory=list)
    final_answer: str = ""
    reward: float | None = None  # None = unscorable (verifier failed), never silently 0
    info: dict[str, Any] = field(default_factory=dict)  # workflow-specific facts (e.g. fallbacks)
    group: int = 0  # which draw of the step it belongs to (a problem drawn twice is two groups)

    def grades(self, name: str) -> list[float | None]:
        """Rewards of the texts graded under `name` (`Team.grade`), in the order they were
        queued; None = unscorable. Empty before scoring."""
        return list(self.info.get("graded_rewards", {}).get(name, []))
