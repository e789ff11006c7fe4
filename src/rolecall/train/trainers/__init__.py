"""Trainers: what a run does with its parts. A module in this folder that defines
`TRAINER = Trainer(...)` is one; a new trainer is one such file.

The config picks its trainer: the first that `claims` it, else the default (RL on the LLM
policies' adapters). Its `check` runs with the other config checks, before any model loads,
so these declarations stay light: a trainer's `run` imports its loop when a run starts
(checking a config takes 0.5 s, importing torch and transformers for a loop 2.9 s here).
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rolecall.registry import declared, discover

if TYPE_CHECKING:  # annotations only
    from rolecall.compose.team import Team
    from rolecall.rundir.directory import RunDir
    from rolecall.schema import Config


@dataclass(frozen=True)
class Trainer:
    name: str
    claims: Callable[["Config"], bool]  # this trainer runs the config
    check: Callable[["Config", "Team"], None]  # ValueError naming the field at fault
    run: Callable[["Config", "RunDir", Any], Path]  # (cfg, run directory, rolecall.train.session.Launch)
    data_parallel: bool = True  # may run under torchrun, each rank in step
    default: bool = False  # the trainer of every config no other trainer claims


@functools.cache
def _registry() -> tuple[Trainer, ...]:
    return tuple(discover(__name__, declared("TRAINER", Trainer)))


def trainer_for(cfg: "Config") -> Trainer:
    trainers = _registry()
    for trainer in trainers:
        if not trainer.default and trainer.claims(cfg):
            return trainer
    return next(t for t in trainers if t.default)
