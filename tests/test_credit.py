"""Per-turn credit: a workflow grades an intermediate answer and sets turn rewards; the rows
the trainer sees carry exactly the advantages those rewards give (values by hand)."""
from __future__ import annotations

import math

import pytest

from rolecall.engines.base import GenOutput
from rolecall.testing import ScriptedEngine
from rolecall.rollout import rollout
from rolecall.algo.batch import rows_for_policy
from rolecall.algo.credit import advantages, credit
from rolecall.types import Problem
from rolecall.workflows import Workflow, WorkflowError, user
from workflow_helpers import score_strict

PROBLEM = Problem(uid="p", prompt="6*7", answer="42")


class DraftCheckFinal(Workflow):
    """solver drafts (graded; that grade is the draft's reward), a checker comments (rewarded
    0.25 by the workflow itself), the solver answers (the outcome), and a second draft is
    graded for metrics only."""

    name = "draft_check_final"
    roles = ("solver", "checker")

    def __init__(self, prompts=None) -> None:
        super().__init__(prompts or {})

    async def run(self, problem, team):
        draft = await team.call("solver", [user(f"draft {problem.prompt}")], slot="draft")
        team.grade(draft, "drafts", reward=True)
        note = await team.call("checker", [user(f"check {draft}")])
        team.reward(note, 0.25)
        final = await team.call("solver", [user(f"final {problem.prompt}")], slot="final")
        team.grade(final + " again", "extra")  # graded only: no turn's reward changes
        return final


class WithIds(ScriptedEngine):
    """The scripted engine, with token ids and log-probs so the turns become training rows."""

    def generate(self, requests, *, temperature):
        outs = super().generate(requests, temperature=temperature)
        return [GenOutput(o.prompt_text, o.completion_text, [1, 2], [3] * len(o.completion_text),
                          [-0.5] * len(o.completion_text)) for o in outs]


def _episodes(drafts, finals):
    """Two samples of one problem; sample g drafts drafts[g] and answers finals[g]."""
    def script(req):
        text = req.messages[-1]["content"]
        g = script.calls[text.split()[0]]
        script.calls[text.split()[0]] += 1
        if text.startswith("draft"):
            return drafts[g]
        if text.startswith("check"):
            return "looks fine"
        return finals[g]

    script.calls = {"draft": 0, "check": 0, "final": 0}
    wf = DraftCheckFinal()
    eps = rollout(wf, [PROBLEM], 2, WithIds(script), {"solver": "solver", "checker": "checker"}, lambda r: 16, 1.0)
    score_strict(eps)
    credit(eps, wf)
    return eps


def test_turn_rewards_and_graded_drafts_reach_the_trainer_rows_exactly():
    # sample 0: right draft, wrong final; sample 1: wrong draft, right final.
    eps = _episodes(drafts=["\\boxed{42}", "\\boxed{41}"], finals=["\\boxed{40}", "\\boxed{42}"])
    assert [ep.reward for ep in eps] == [0.0, 1.0]
    assert [ep.grades("drafts") for ep in eps] == [[1.0], [0.0]]
    assert [ep.grades("extra") for ep in eps] == [[0.0], [1.0]]  # graded like the final answer ...
    assert eps[0].turn_rewards == {0: 1.0, 1: 0.25}  # ... but no turn is rewarded with it

    turns, adv, _ = advantages(eps, "grpo", "slot")
    # Groups (problem, slot): draft [1, 0] -> +-0.5/std, std of [1, 0] = sqrt(0.5);
    # checker [0.25, 0.25] -> 0 (no spread); final (outcome) [0, 1] -> -+0.5/std.
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    by_turn = {(ep.sample, t.slot): x for (t, x), ep in zip(zip(turns, adv), [e for e in eps for _ in e.turns])}
    assert by_turn == pytest.approx({(0, "draft"): a, (0, "checker"): 0.0, (0, "final"): -a,
                                     (1, "draft"): -a, (1, "checker"): 0.0, (1, "final"): a})
    solver_rows = rows_for_policy(turns, adv, "solver")
    assert [(r.slot, round(r.advantage, 6)) for r in solver_rows] == [
        ("draft", round(a, 6)), ("final", round(-a, 6)), ("draft", round(-a, 6)), ("final", round(a, 6))]
    assert [r.advantage for r in rows_for_policy(turns, adv, "checker")] == [0.0, 0.0]


def test_workflow_turn_rewards_override_and_unscorable_grades_leave_the_statistics():
    class Override(DraftCheckFinal):
        def turn_rewards(self, episode):
            return {1: float("nan")} if episode.sample == 0 else None  # a broken formula: unscorable

    eps = _episodes(drafts=["\\boxed{42}", "\\boxed{42}"], finals=["\\boxed{42}", "\\boxed{1}"])
    for ep in eps:
        ep.turn_rewards = {}
    credit(eps, Override())
    assert eps[0].turn_rewards == {0: 1.0, 1: None}
    turns, adv, m = advantages(eps, "grpo", "slot")
    checker = [x for t, x in zip(turns, adv) if t.slot == "checker"]
    assert checker == [0.0, 0.0] and m["adv/unscorable"] == 1.0


def test_grade_and_reward_refuse_what_cannot_name_a_turn():
    class Bad(DraftCheckFinal):
        async def run(self, problem, team):
            await team.call("solver", [user("x")])
            team.grade("plain text", "drafts", reward=True)
            return "x"

    with pytest.raises(WorkflowError, match=r"TypeError: team.grade\(..., reward=True.*needs a reply of team.call"):
        rollout(Bad(), [PROBLEM], 1, ScriptedEngine(lambda r: "a"), {"solver": "s", "checker": "c"}, lambda r: 8, 1.0)


def test_a_request_keeps_the_messages_it_was_sent():
    """A workflow that extends its chat list after sending it (`chat += ...`, as the example
    workflow does) does not rewrite the request it sent, which engines and logs keep."""
    from rolecall.workflows import assistant

    class Appender(Workflow):
        name, roles = "appender", ("solver",)

        async def run(self, problem, team):
            chat = [user("first")]
            answer = await team.call("solver", chat)
            chat += [assistant(answer), user("second")]
            return await team.call("solver", chat)

    engine = ScriptedEngine(lambda r: str(len(r.messages)))
    eps = rollout(Appender({}), [PROBLEM], 1, engine, {"solver": "s"}, lambda r: 8, 1.0)
    assert eps[0].final_answer == "3"
    assert engine.batches[0][0].messages == [user("first")]


@pytest.mark.parametrize("messages, message", [
    ("just a string", "messages must be a non-empty list"),
    ([], "messages must be a non-empty list"),
    ([{"role": "user"}], r"message 0 must be \{'role': str, 'content': str\}"),
    ([{"role": "user", "content": 7}], "message 0 must be"),
])
def test_malformed_messages_name_the_role(messages, message):
    class Sloppy(Workflow):
        name, roles = "sloppy", ("solver",)

        async def run(self, problem, team):
            return await team.call("solver", messages)

    with pytest.raises(WorkflowError, match=rf"TypeError: team.call\('solver', ...\): {message}"):
        rollout(Sloppy({}), [PROBLEM], 1, ScriptedEngine(lambda r: "a"), {"solver": "s"}, lambda r: 8, 1.0)


def test_a_bug_in_workflow_code_names_the_workflow_the_problem_and_the_line(tmp_path):
    class Buggy(Workflow):
        name, roles = "buggy", ("solver",)
        templates = {}

        async def run(self, problem, team):
            reply = await team.call("solver", [user("x")])
            return self.render("solve_again", problem=reply)  # a template its prompts lack

    with pytest.raises(WorkflowError) as e:
        rollout(Buggy({"solve": "$problem"}), [PROBLEM], 1, ScriptedEngine(lambda r: "a"), {"solver": "s"},
                lambda r: 8, 1.0)
    msg = str(e.value)
    assert msg.startswith("workflow 'buggy' failed on problem 'p': KeyError:") and "'solve_again'" in msg
    assert f"at {__file__}:" in msg and "in run)" in msg, msg
    assert isinstance(e.value.__cause__, KeyError)


def test_the_cli_prints_a_workflow_bug_in_one_line_unless_a_traceback_is_asked_for(tiny_model_dir, tmp_path,
                                                                                   monkeypatch):
    from typer.testing import CliRunner

    from rolecall.cli import app

    (tmp_path / "bad_wf.py").write_text(
        "from rolecall.workflows import Workflow, user\n"
        "class Bad(Workflow):\n"
        "    name, roles = 'bad', ('solver',)\n"
        "    def __init__(self, prompts={'solve': '$problem'}):\n"
        "        super().__init__(prompts)\n"
        "    async def run(self, problem, team):\n"
        "        reply = await team.call('solver', [user(problem.prompt)])\n"
        "        return reply.upper() + 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    args = ["train", f"model.path={tiny_model_dir}", "workflow.name=bad_wf:Bad", "routing=shared", "task.n_val=2",
            "rollout.max_new_tokens=2", "train.steps=1", "--out", str(tmp_path / "run")]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert "workflow 'bad' failed on problem" in res.output and "bad_wf.py:8, in run" in res.output, res.output
    monkeypatch.setenv("ROLECALL_TRACEBACK", "1")
    res = CliRunner().invoke(app, [*args[:-1], str(tmp_path / "run2")])
    assert res.exit_code == 1 and isinstance(res.exception, WorkflowError)
