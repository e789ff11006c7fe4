"""`single`: one generator call (the single-agent RL control)."""
from __future__ import annotations

from rolecall.types import Problem
from rolecall.workflows.base import Team, Workflow, user


class Single(Workflow):
    name = "single"
    roles = ("generator",)
    templates = {"generator": ("problem",)}

    async def run(self, problem: Problem, team: Team) -> str:
        return await team.call("generator", [user(self.render("generator", problem=problem.prompt))])
