"""Trainers: what a run does with its parts. A module of `rolecall.train` that defines
`TRAINER = Trainer(...)` is one; a new trainer is one such file.

The config picks its trainer: the first that `claims` it, else the default (RL on the LLM
policies' adapters). Its `check` runs with the other config checks, before any model loads.
"""
from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only
    from rolecall.compose.team import Team
    from rolecall.rundir.directory import RunDir
    from rolecall.schema import Config


@dataclass(frozen=True)
class Trainer:
    name: str
    summary: str
    claims: Callable[["Config"], bool]  # this trainer runs the config
    check: Callable[["Config", "Team"], None]  # ValueError naming the field at fault
    run: Callable[["Config", "RunDir", Any], Path]  # (cfg, run directory, rolecall.train.session.Launch)
    data_parallel: bool = True  # may run under torchrun, each rank in step
    default: bool = False  # the trainer of every config no other trainer claims


@functools.cache
def _registry() -> tuple[Trainer, ...]:
    package = importlib.import_module(__name__.rpartition(".")[0])
    found = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        trainer = getattr(importlib.import_module(f"{package.__name__}.{info.name}"), "TRAINER", None)
        if isinstance(trainer, Trainer):
            found.append(trainer)
    return tuple(found)


def trainer_for(cfg: "Config") -> Trainer:
    trainers = _registry()
    for trainer in trainers:
        if not trainer.default and trainer.claims(cfg):
            return trainer
    return next(t for t in trainers if t.default)
