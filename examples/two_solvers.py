"""A user's own workflow: two solvers answer, read each other, revise; a judge picks one.

Written the way a new user would, in their own words: none of these sentences is a shipped
prompt or in the embedded model's pretraining data (tests/test_wordings.py checks that),
though after this workflow was first measured the pretraining wordings were extended to
cover its style (a format said in words, "First:"/"Second:" labels); the workflows in
examples/held_out_workflows.py are the ones kept out entirely. It is built only from
generic role functions: solve, revise after reading a peer's answer, pick 1 or 2.

    rolecall train workflow.name=examples.two_solvers:TwoSolvers routing=isolated --steps 30
"""
from __future__ import annotations

import asyncio

from rolecall.parsing import last_boxed
from rolecall.types import Problem
from rolecall.workflows import Team, Workflow, user

PROMPTS = {
    "solve": "Work out the following and box the final result like \\boxed{42}.\n$problem",
    "revise": "Problem $problem\nMy result was $mine and my partner got $theirs.\n"
              "Think again and give the final result in a box.",
    "judge": "Two classmates solved $problem\nFirst: $first\nSecond: $second\n"
             "Who is right? Say \\boxed{1} for the first or \\boxed{2} for the second.",
}


class TwoSolvers(Workflow):
    name = "two_solvers"
    roles = ("solver", "judge")
    templates = {"solve": ("problem",), "revise": ("problem", "mine", "theirs"), "judge": ("problem", "first", "second")}

    def __init__(self, prompts=PROMPTS) -> None:
        super().__init__(prompts)

    async def run(self, problem: Problem, team: Team) -> str:
        ask = [user(self.render("solve", problem=problem.prompt))]
        drafts = await asyncio.gather(*(team.call("solver", ask, slot=f"solver{i}") for i in (0, 1)))
        shown = [last_boxed(d) or d.strip() for d in drafts]
        finals = await asyncio.gather(*(
            team.call("solver", [user(self.render("revise", problem=problem.prompt, mine=shown[i], theirs=shown[1 - i]))],
                      slot=f"reviser{i}") for i in (0, 1)))
        pick = await team.call("judge", [user(self.render(
            "judge", problem=problem.prompt, first=finals[0].strip(), second=finals[1].strip()))])
        choice = 2 if (last_boxed(pick) or "").strip() == "2" else 1
        team.info["judge_parsed"] = (last_boxed(pick) or "").strip() in ("1", "2")
        return finals[choice - 1]
