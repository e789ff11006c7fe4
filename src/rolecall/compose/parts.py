"""`build_parts(cfg)`: the run's parts from a validated config, for every entry point.

Training, evaluation, export, `generate`, the Ray rollout actors and the grid all start here,
so the same config always means the same workflow, routing, problems, verifier and models.
The heavy parts (tokenizer, problems, verifier processes, base models) are built on request:
export needs no problems, `generate` loads one base, a Ray actor needs no problems either.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rolecall.compose.bases import Base, build_bases, policy_paths
from rolecall.compose.team import build_team
from rolecall.policies.model import load_tokenizer
from rolecall.policies.routing import Routing
from rolecall.rewards.verifier import Verifier, build_verifier
from rolecall.tasks import TaskSource, get_task
from rolecall.types import Problem
from rolecall.workflows import Workflow

if TYPE_CHECKING:  # annotations only
    from rolecall.schema import Config


@dataclass
class Parts:
    cfg: "Config"
    workflow: Workflow
    routing: Routing
    task: TaskSource

    def tokenizer(self):
        """The run's own tokenizer (its model's, or `model.chat_template`'s template)."""
        return load_tokenizer(self.cfg.model.path, self.cfg.model.chat_template)

    def problems(self, tok=None, log: Callable[[str], None] = print) -> tuple[list[Problem], list[Problem]]:
        """(train, validation); `tok` measures prompts for `data.max_prompt_tokens`."""
        train_P, val_P = self.task.problems(self.cfg, token_counter(tok) if tok is not None else None, log)
        if not train_P or not val_P:
            raise ValueError(f"task: empty dataset (train {len(train_P)}, validation {len(val_P)} problems)")
        return train_P, val_P

    def verifier(self) -> Verifier:
        """A new verifier (each process that scores owns its own grading processes; close it when done)."""
        return build_verifier(self.cfg.reward_cfg())

    def bases(self, tok, only: str | None = None) -> dict[str, Base]:
        """Every base model the routing needs (or the one at path `only`), adapters attached."""
        return build_bases(self.cfg, self.routing, tok, only=only)

    def base_path(self, role: str) -> str:
        """The base model path that serves `role` (a role on `base` runs on the run's own model)."""
        return policy_paths(self.cfg, self.routing).get(self.routing.routes[role], self.cfg.model.path)


def build_parts(cfg: "Config") -> Parts:
    team = build_team(cfg)
    return Parts(cfg, team.workflow, team.routing, get_task(cfg.task.name))


def token_counter(tok) -> Callable[[str], int]:
    """Prompt length in the model's own tokens (data.max_prompt_tokens)."""
    return lambda text: len(tok(text, add_special_tokens=False)["input_ids"])
