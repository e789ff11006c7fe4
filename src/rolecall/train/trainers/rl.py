"""The default trainer: RL on the LLM policies' LoRA adapters (`rolecall.train.loop`)."""
from __future__ import annotations

from pathlib import Path

from rolecall.train.trainers import Trainer


def check_rl(cfg, team) -> None:
    if not team.routing.adapters:
        raise ValueError("routing: at least one role must be routed to a trainable adapter")


def run_rl(cfg, run, launch) -> Path:
    from rolecall.train.loop import run_rl as loop  # torch loads when a run starts, not when a config is checked

    return loop(cfg, run, launch)


TRAINER = Trainer(name="rl", claims=lambda cfg: True, check=check_rl, run=run_rl, default=True)
