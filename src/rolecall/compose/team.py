"""The workflow a config names and the routing of its roles to policies: built here and only here."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rolecall.policies.routing import Routing, build_routing
from rolecall.workflows import Workflow, build_workflow, workflow_prompts

if TYPE_CHECKING:  # annotations only
    from rolecall.schema import Config


@dataclass
class Team:
    """Who plays: the workflow (its roles and how a problem flows through them) and which policy plays each role."""

    workflow: Workflow
    routing: Routing


def build_team(cfg: "Config") -> Team:
    w = cfg.workflow
    workflow = build_workflow(w.name, workflow_prompts(w.name, w.prompts), w.options)
    return Team(workflow, build_routing(cfg.routing, workflow.roles, cfg.policy_table()))
