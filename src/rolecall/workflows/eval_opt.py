"""`eval_opt`: a generator answers, an evaluator judges, the generator revises on critique.

At most `rounds` generator calls (paper: 3 for math, 2 for code). The evaluator follows
every generator call but the last, whose verdict could change nothing. A verdict other than
`\\boxed{Correct}` (Incorrect or unparseable) triggers a revision. All generator calls share
the slot `generator` and all evaluator calls the slot `evaluator`, as in the paper's code.
"""
from __future__ import annotations

from rolecall.parsing import last_boxed
from rolecall.types import Problem
from rolecall.workflows.base import Team, Workflow, assistant, positive_int_option, user


def parse_verdict(text: str) -> bool | None:
    """True for Correct, False for Incorrect, None when no verdict box can be read."""
    box = (last_boxed(text) or "").strip().lower()
    return {"correct": True, "incorrect": False}.get(box)


class EvalOpt(Workflow):
    name = "eval_opt"
    roles = ("generator", "evaluator")

    def __init__(self, prompts, rounds: int = 3) -> None:
        super().__init__(prompts)
        self.rounds = positive_int_option("rounds", rounds)

    async def run(self, problem: Problem, team: Team) -> str:
        chat = [user(self.render("generator", problem=problem.prompt))]
        answer = await team.call("generator", chat)
        verdicts: list[bool | None] = []
        for _ in range(self.rounds - 1):
            review = await team.call("evaluator", [user(self.render(
                "evaluator", problem=problem.prompt, solution=answer.strip()))])
            verdict = parse_verdict(review)
            verdicts.append(verdict)
            if verdict is True:
                break
            chat = chat + [assistant(answer), user(self.render("revise", critique=review.strip()))]
            answer = await team.call("generator", chat)
        team.info["verdicts"] = verdicts
        return answer
