"""The deliberation meta-policy's trainer: supervised bootstrap, offline corpus, SoftRankPO
(`rolecall.metatrain.stages`); the LLM agents stay frozen. It runs every config with a
`metapolicy:` section.

This package sits below the trainers and cannot import them, so the trainer is declared here
as a plain object and registered by the entry layer's config loading (`rolecall.config`
passes `MetaPolicyTrainer(WORKFLOWS)` to `rolecall.train.trainers.register`). The registry
gives it a `run` that builds the run's parts and hands `train` a harness: the run directory,
the resume fingerprint, and the episodes, played in the trainer's process or on the Ray
rollout actors (`rollout.actors`). Light at import: config checks load it; torch loads when a
run starts.
"""
from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only
    from rolecall.compose.team import Team
    from rolecall.schema import Config
    from rolecall.train.harness import Harness

# Why torchrun is refused (quoted in its error and in docs/deliberation.md).
WHY_SERIAL = ("the meta-policy is a network of a few thousand parameters fitted to stored states, a small "
              "part of the run's time, with nothing to gain from ranks in step; the time goes to the agents' "
              "rollouts, which rollout.actors spreads over Ray actors instead")


@dataclass(frozen=True)
class MetaPolicyTrainer:
    """The trainer declaration `rolecall.train.trainers.register` takes (its `Hosted`)."""

    workflows: Mapping[str, type]  # every workflow by name: the check names those that take a deliberator
    name: str = "metapolicy"
    why_serial: str = WHY_SERIAL

    def claims(self, cfg: "Config") -> bool:
        return cfg.metapolicy is not None

    def check(self, cfg: "Config", team: "Team") -> None:
        """A meta-policy decides for a workflow that takes a deliberator; the LLM agents stay frozen."""
        mp, routing = cfg.metapolicy, team.routing
        if not hasattr(team.workflow, "deliberator"):
            takers = sorted(name for name, cls in self.workflows.items()
                            if "deliberator" in inspect.signature(cls).parameters)
            raise ValueError(f"metapolicy: a meta-policy decides for a workflow that takes a deliberator ({takers}), "
                             f"but workflow.name is {cfg.workflow.name!r}")
        if "deliberator" in cfg.workflow.options or "counterfactual" in cfg.workflow.options:
            raise ValueError("workflow.options.deliberator/counterfactual: set by the meta-policy's training stages "
                             "when metapolicy is set; remove them")
        llm = sorted(set(routing.routes.values()) | set(routing.adapters))
        if mp.name in llm:
            raise ValueError(f"metapolicy.name: {mp.name!r} is also an LLM policy of the routing ({llm}); "
                             "a meta-policy plays no LLM role, name it apart")
        if routing.trainable:
            raise ValueError(f"routing: the agents stay frozen while the meta-policy trains, but policies "
                             f"{list(routing.trainable)} are trainable; route the agents to 'base' "
                             "(or to adapters with trainable: false)")

    def train(self, cfg: "Config", harness: "Harness") -> dict:
        from rolecall.metatrain.stages import train_metapolicy  # torch loads when a run starts, not at config checks

        return train_metapolicy(cfg, harness)
