"""A user-written workflow: one role proposes an answer, a second role checks it.

Plain async Python against the `Team` contract: every `await team.call(role, messages)` is
one LLM turn that rolecall batches, routes to a policy, scores and trains. The checker sees
the proposal; if it does not stamp \\boxed{OK}, the proposer gets one retry with the note.

Train it from the repository root (prompts are data: a YAML file, or the dict below):

    rolecall train workflow.name=examples.my_workflow:ProposeCheck \\
        workflow.prompts=examples/my_workflow_prompts.yaml routing=isolated

Roles `proposer` and `checker` get one LoRA adapter each under `routing=isolated`, one shared
adapter under `routing=shared`, or any `{proposer: a, checker: b}` map.
"""
from __future__ import annotations

from rolecall.parsing import last_boxed
from rolecall.types import Problem
from rolecall.workflows import Team, Workflow, assistant, user

# The same templates as examples/my_workflow_prompts.yaml, for use from Python.
PROMPTS = {
    "propose": "Solve. Put the final answer in \\boxed{}.\n$problem",
    "check": "Is this answer right? Reply \\boxed{OK} or \\boxed{WRONG} and why.\n$problem\nAnswer: $answer",
    "retry": "A checker said: $note\nTry again. Answer in \\boxed{}.",
}


class ProposeCheck(Workflow):
    name = "propose_check"
    roles = ("proposer", "checker")
    templates = {"propose": ("problem",), "check": ("problem", "answer"), "retry": ("note",)}

    def __init__(self, prompts=PROMPTS, retries: int = 1) -> None:
        super().__init__(prompts)
        self.retries = retries

    async def run(self, problem: Problem, team: Team) -> str:
        chat = [user(self.render("propose", problem=problem.prompt))]
        answer = await team.call("proposer", chat)
        for _ in range(self.retries):
            note = await team.call("checker", [user(self.render("check", problem=problem.prompt, answer=answer))])
            team.info["checked_ok"] = (last_boxed(note) or "").upper() == "OK"
            if team.info["checked_ok"]:
                break
            chat += [assistant(answer), user(self.render("retry", note=note))]
            answer = await team.call("proposer", chat)
        return answer
