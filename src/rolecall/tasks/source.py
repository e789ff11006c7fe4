"""What a task declares about itself, so that no dispatch chain elsewhere needs its name.

A task module defines `TASK = TaskSource(...)`; `rolecall.tasks.get_task` finds it. The
composition root asks the source for the problems, the config checks ask it which verifier
grades its rows, and the resume fingerprint asks it what identifies its problems.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rolecall.types import Problem

Split = tuple[list[Problem], list[Problem]]  # (train, validation)


@dataclass(frozen=True)
class TaskSource:
    """A source of problems.

    `problems(cfg, count_tokens, log)` gives (train, validation); `identity(cfg)` gives what
    the resume fingerprint records about the source (a `path` and a one-line `task`).
    `reward` names the verifier that grades its rows; a task that reads files of several
    layouts maps each `formats` entry to its verifier instead. `math_checker` is what
    `reward.math_checker: auto` means on this task. `reads_data`: the rows come from the
    config's `data` section (then `data.path` is required, and refused otherwise). `check(cfg)`,
    if given, runs with the config checks (before any model loads) and raises ValueError naming
    the field at fault: what the task needs installed, options only its library can judge.
    """

    name: str
    problems: Callable[[Any, Callable[[str], int] | None, Callable[[str], None]], Split]
    identity: Callable[[Any], dict]
    reward: str | None = None
    formats: Mapping[str, str] = field(default_factory=dict)
    math_checker: str = "math_verify"
    reads_data: bool = False
    check: Callable[[Any], None] | None = None

    def reward_for(self, cfg) -> str:
        """The verifier that grades this task's rows under `cfg` (by its data format, if it has several)."""
        return self.formats[cfg.data.format] if self.formats else self.reward
