"""Tasks: where problems come from. Each module here that defines `TASK` (a `TaskSource`) is a task.

A new task is one file in this folder: it is found by its `TASK`, and `task.name=<its name>`
selects it. Discovery imports the modules once, on the first lookup.
"""
from __future__ import annotations

import functools

from rolecall.registry import declared, discover
from rolecall.tasks.arithmetic import ArithmeticTask
from rolecall.tasks.multihop import MultiHopTask
from rolecall.tasks.source import TaskSource

__all__ = ["ArithmeticTask", "MultiHopTask", "TaskSource", "get_task", "task_names"]


@functools.cache
def _registry() -> dict[str, TaskSource]:
    return {source.name: source for source in discover(__name__, declared("TASK", TaskSource))}


def task_names() -> list[str]:
    return sorted(_registry())


def get_task(name: str) -> TaskSource:
    """The task named `name`; ValueError naming the known ones otherwise."""
    try:
        return _registry()[name]
    except KeyError:
        raise ValueError(f"task.name: unknown {name!r}; allowed: {task_names()}") from None
