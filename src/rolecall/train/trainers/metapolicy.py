"""The deliberation meta-policy's trainer (`rolecall.train.metapolicy`): supervised bootstrap,
offline corpus, SoftRankPO; the LLM agents stay frozen. It runs every config with a
`metapolicy:` section."""
from __future__ import annotations

import inspect
from pathlib import Path

from rolecall.train.trainers import Trainer
from rolecall.workflows import WORKFLOWS


def run_metapolicy(cfg, run, launch) -> Path:
    from rolecall.train.metapolicy import run_metapolicy as stages  # torch loads when a run starts

    return stages(cfg, run, launch)


def check_metapolicy(cfg, team) -> None:
    """A meta-policy decides for a workflow that takes a deliberator; the LLM agents stay frozen."""
    mp, routing = cfg.metapolicy, team.routing
    if not hasattr(team.workflow, "deliberator"):
        takers = sorted(name for name, cls in WORKFLOWS.items() if "deliberator" in inspect.signature(cls).parameters)
        raise ValueError(f"metapolicy: a meta-policy decides for a workflow that takes a deliberator ({takers}), "
                         f"but workflow.name is {cfg.workflow.name!r}")
    if cfg.rollout.actors:
        raise ValueError("rollout.actors: a meta-policy run decides in the trainer's own workflow; "
                         "Ray rollout actors would play theirs; set rollout.actors=0")
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


TRAINER = Trainer(name="metapolicy", claims=lambda cfg: cfg.metapolicy is not None, check=check_metapolicy,
                  run=run_metapolicy, data_parallel=False)
