"""More users' workflows in wording the embedded model was not pretrained on.

Written before the wordings they are measured against were extended, and kept out of the
pretraining data (tests/test_wordings.py checks every sentence), so that a rebuilt
embedded model can be judged on wording it never saw, not on the one example it was tuned
for. Each is built from generic role functions only.

    rolecall train workflow.name=examples.held_out_workflows:CriticLoop --steps 30
    rolecall eval configs/examples/single.yaml workflow.name=examples.held_out_workflows:LetterVote --base

CoachedSolve was written in session 8, after CriticLoop and LetterVote had been measured and
before the wordings were extended the second time.
"""
from __future__ import annotations

import asyncio

from rolecall.parsing import last_boxed
from rolecall.types import Problem
from rolecall.workflows import Team, Workflow, assistant, user

CRITIC_PROMPTS = {
    "attempt": "Here is a sum for you: $problem\nReply with just the result wrapped as \\boxed{result}.",
    "critic": "Sum: $problem\nStudent wrote: $attempt\nAs a strict marker, answer \\boxed{RIGHT} or \\boxed{NOT RIGHT}.",
    "again": "Your marker replied $verdict. Have another go; again just \\boxed{result}.",
}


class CriticLoop(Workflow):
    """A solver, a marker that says right or not, one retry in the same conversation."""

    name = "critic_loop"
    roles = ("student", "marker")
    templates = {"attempt": ("problem",), "critic": ("problem", "attempt"), "again": ("verdict",)}

    def __init__(self, prompts=CRITIC_PROMPTS) -> None:
        super().__init__(prompts)

    async def run(self, problem: Problem, team: Team) -> str:
        chat = [user(self.render("attempt", problem=problem.prompt))]
        attempt = await team.call("student", chat)
        verdict = await team.call("marker", [user(self.render("critic", problem=problem.prompt, attempt=attempt))])
        if (last_boxed(verdict) or "").strip().upper() == "RIGHT":
            return attempt
        chat = [*chat, assistant(attempt), user(self.render("again", verdict=verdict.strip()))]
        return await team.call("student", chat)


VOTE_PROMPTS = {
    "answer": "Arithmetic check, please.\n$problem\nWhat do you get? Give it as \\boxed{value}.",
    "choose": "Three people tried $problem\n$options\nWhich letter is correct? Respond with \\boxed{A}, \\boxed{B} or \\boxed{C}.",
}
LETTERS = "ABC"


class LetterVote(Workflow):
    """Three answers labelled A, B, C; a chooser answers with a letter."""

    name = "letter_vote"
    roles = ("answerer", "chooser")
    templates = {"answer": ("problem",), "choose": ("problem", "options")}

    def __init__(self, prompts=VOTE_PROMPTS) -> None:
        super().__init__(prompts)

    async def run(self, problem: Problem, team: Team) -> str:
        ask = [user(self.render("answer", problem=problem.prompt))]
        answers = await asyncio.gather(*(team.call("answerer", ask, slot=f"answerer{i}") for i in range(3)))
        options = "\n".join(f"{LETTERS[i]}) {a.strip()}" for i, a in enumerate(answers))
        pick = await team.call("chooser", [user(self.render("choose", problem=problem.prompt, options=options))])
        letter = (last_boxed(pick) or "").strip().upper()
        return answers[LETTERS.index(letter)] if letter in ("A", "B", "C") else answers[0]


COACH_PROMPTS = {
    "tactics": "Before anybody calculates $problem, jot down two tactics, numbered, that might help. No calculating yet.",
    "work": "Tactic to follow: $tactic\nNow tackle $problem and wrap the outcome as \\boxed{outcome}.",
    "referee": "Somebody tackled $problem and ended up with $outcome. Is that accurate? Respond \\boxed{YES} or \\boxed{NO}.",
}


class CoachedSolve(Workflow):
    """A coach lists tactics, a worker follows the first, a referee accepts it or the worker
    tries again with the second tactic."""

    name = "coached_solve"
    roles = ("coach", "worker", "referee")
    templates = {"tactics": ("problem",), "work": ("tactic", "problem"), "referee": ("problem", "outcome")}

    def __init__(self, prompts=COACH_PROMPTS) -> None:
        super().__init__(prompts)

    async def run(self, problem: Problem, team: Team) -> str:
        notes = await team.call("coach", [user(self.render("tactics", problem=problem.prompt))])
        tactics = [ln.split(".", 1)[-1].strip() for ln in notes.splitlines() if ln.strip()] or ["any"]
        tactics += tactics[-1:]  # one listed tactic serves both tries

        async def work(tactic: str, slot: str) -> str:
            return await team.call("worker", [user(self.render("work", tactic=tactic, problem=problem.prompt))], slot=slot)

        outcome = await work(tactics[0], "worker0")
        shown = last_boxed(outcome) or outcome.strip()
        ruling = await team.call("referee", [user(self.render("referee", problem=problem.prompt, outcome=shown))])
        if (last_boxed(ruling) or "").strip().upper() == "YES":
            return outcome
        return await work(tactics[1], "worker1")
