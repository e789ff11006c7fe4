"""The engine contract: a batch of requests, each with its own policy, in; completions out."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from rolecall.types import Message

# Most rows in one generate call unless the run says otherwise (config: rollout.max_batch).
DEFAULT_MAX_BATCH = 512


@dataclass
class GenRequest:
    messages: list[Message]
    policy: str  # adapter name, or "base" for the base model with adapters disabled
    max_new_tokens: int
    # This request's own sampling seed: its tokens then depend on it alone, not on which other
    # requests share its batch (an engine without per-request seeds may ignore it).
    seed: int | None = None


@dataclass
class GenOutput:
    prompt_text: str
    completion_text: str
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)  # sampling log-probs (temperature applied)
    finish_reason: str = "stop"  # "length" when the token budget cut the turn


class Engine(Protocol):
    def generate(self, requests: list[GenRequest], *, temperature: float) -> list[GenOutput]:
        """One output per request, same order. Rows may name different policies."""
        ...
