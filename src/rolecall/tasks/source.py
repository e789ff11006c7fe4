"""What a task declares about itself, so that no dispatch chain elsewhere needs its name.

A task module defines `TASK = TaskSource(...)`; `rolecall.tasks.get_task` finds it. The
composition root asks the source for the problems, the config checks ask it which verifier
grades its rows, and the resume fingerprint asks it what identifies its problems.
"""
from __future__ import annotations

import dataclasses
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

    `options`: a dataclass of the task's own options. `task.options: {name: value}` in a config
    is checked against its fields and their types when the config loads (`parse_options`), so a
    task with options of its own is still one file: `options_of(cfg)` gives the task an instance.
    """

    name: str
    problems: Callable[[Any, Callable[[str], int] | None, Callable[[str], None]], Split]
    identity: Callable[[Any], dict]
    reward: str | None = None
    formats: Mapping[str, str] = field(default_factory=dict)
    math_checker: str = "math_verify"
    reads_data: bool = False
    check: Callable[[Any], None] | None = None
    options: type | None = None

    def parse_options(self, given: Mapping[str, Any]) -> Any:
        """`given` as an instance of `options` (missing fields take their defaults); ValueError
        naming `task.options.<field>` for an unknown field or a value of the wrong type."""
        if self.options is None:
            if given:
                raise ValueError(f"task.options: task {self.name!r} declares no options of its own, got {sorted(given)}")
            return None
        names = [f.name for f in dataclasses.fields(self.options)]
        unknown = sorted(set(given) - set(names))
        if unknown:
            raise ValueError(f"task.options.{unknown[0]}: not an option of task {self.name!r}; its options: {names}")
        import typing

        from pydantic import TypeAdapter, ValidationError  # strict: `true` is not 1, "3" is not 3
        hints = typing.get_type_hints(self.options)
        values = {}
        for name, value in given.items():
            try:
                values[name] = TypeAdapter(hints.get(name, Any)).validate_python(value, strict=True)
            except ValidationError as e:
                raise ValueError(f"task.options.{name}: {e.errors()[0]['msg']} (got {value!r})") from None
        try:
            return self.options(**values)
        except (TypeError, ValueError) as e:  # a missing required option, the dataclass's own checks
            raise ValueError(f"task.options: {e}") from None

    def options_of(self, cfg) -> Any:
        """The task's options in `cfg` (its `task.options`), as an instance of `options`."""
        return self.parse_options(cfg.task.options)

    def reward_for(self, cfg) -> str:
        """The verifier that grades this task's rows under `cfg` (by its data format, if it has several)."""
        return self.formats[cfg.data.format] if self.formats else self.reward
