"""Trainers: what a run does with its parts. A module in this folder that defines
`TRAINER = Trainer(...)` is one; a new trainer is one such file.

A package below this layer may bring a trainer of its own, for something it trains itself
while the LLM agents stay frozen. It cannot import this package, so it declares the trainer
as a plain object (`Hosted`: `name`, `claims`, `check`, `train(cfg, harness)`, `why_serial`),
and the entry layer's config loading (`rolecall.config`) passes it to `register`, which makes
it a `Trainer` whose `run` builds the run's parts and hands `train` a harness
(`rolecall.train.harness.Harness`: the run directory, the resume fingerprint, rollouts in
this process or on the Ray rollout actors). This package never names such a trainer.

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
from typing import TYPE_CHECKING, Any, Protocol

from rolecall.registry import declared, discover

if TYPE_CHECKING:  # annotations only
    from rolecall.compose.team import Team
    from rolecall.rundir.directory import RunDir
    from rolecall.schema import Config
    from rolecall.train.harness import Harness


@dataclass(frozen=True)
class Trainer:
    name: str
    claims: Callable[["Config"], bool]  # this trainer runs the config
    check: Callable[["Config", "Team"], None]  # ValueError naming the field at fault
    run: Callable[["Config", "RunDir", Any], Path]  # (cfg, run directory, rolecall.train.session.Launch)
    data_parallel: bool = True  # may run under torchrun, each rank in step
    default: bool = False  # the trainer of every config no other trainer claims
    why_serial: str = ""  # when not data_parallel: why, said when torchrun is refused


class Hosted(Protocol):
    """A trainer declared outside this package (see the module docstring). It runs in one
    process; `why_serial` says why (the refusal of torchrun quotes it)."""

    name: str
    why_serial: str

    def claims(self, cfg: "Config") -> bool: ...

    def check(self, cfg: "Config", team: "Team") -> None: ...

    def train(self, cfg: "Config", harness: "Harness") -> Any: ...


_REGISTERED: dict[str, Trainer] = {}


def register(hosted: Hosted) -> Trainer:
    """Add a trainer declared outside this package (registering a name again replaces it)."""
    def run(cfg: "Config", run_dir: "RunDir", launch: Any) -> Path:
        from rolecall.train.harness import run_hosted  # torch loads when a run starts, not when a config is checked

        return run_hosted(hosted.train, cfg, run_dir, launch)

    trainer = Trainer(name=hosted.name, claims=hosted.claims, check=hosted.check, run=run, data_parallel=False,
                      why_serial=hosted.why_serial)
    _REGISTERED[trainer.name] = trainer
    return trainer


@functools.cache
def _declared() -> tuple[Trainer, ...]:
    return tuple(discover(__name__, declared("TRAINER", Trainer)))


def trainers() -> tuple[Trainer, ...]:
    """Every trainer: those of this folder (by module name), then the registered ones."""
    return (*_declared(), *_REGISTERED.values())


def trainer_for(cfg: "Config") -> Trainer:
    found = trainers()
    for trainer in found:
        if not trainer.default and trainer.claims(cfg):
            return trainer
    return next(t for t in found if t.default)
