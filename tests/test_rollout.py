"""Rollout: wave batching across episodes, ordering, and what the engine's outputs become."""
from __future__ import annotations

import asyncio

import pytest

from rolecall.engines.base import GenOutput
from rolecall.testing import ScriptedEngine
from rolecall.rollout import rollout
from rolecall.types import Problem
from rolecall.workflows import Workflow, build_workflow, load_prompts, user


def problems(n: int) -> list[Problem]:
    return [Problem(uid=f"p{i}", prompt=f"{i}+{i}", answer=str(2 * i)) for i in range(n)]


def isolated(wf):
    return {r: r for r in wf.roles}


def go(wf, engine, P=2, G=3, routes=None, **kw):
    return rollout(wf, problems(P), G, engine, routes or isolated(wf), kw.pop("mnt", lambda r: 16),
                   kw.pop("temperature", 0.7), **kw)


@pytest.mark.parametrize("P,G", [(1, 1), (2, 3), (4, 2)])
def test_voting_issues_exactly_two_batches(P, G):
    """All 3*P*G generator calls form one batch, then the P*G aggregator calls another."""
    wf = build_workflow("voting", load_prompts(), {})
    engine = ScriptedEngine(lambda r: "\\boxed{1}")
    eps = go(wf, engine, P, G)
    assert [len(b) for b in engine.batches] == [3 * P * G, P * G]
    assert {r.policy for r in engine.batches[0]} == {"generator"}
    assert {r.policy for r in engine.batches[1]} == {"aggregator"}
    assert len(eps) == P * G and all(len(e.turns) == 4 for e in eps)


def test_orch_workers_waves():
    wf = build_workflow("orch_workers", load_prompts(), {})
    engine = ScriptedEngine(lambda r: "1. a\n2. b\n3. c")
    go(wf, engine, 2, 2)
    assert [len(b) for b in engine.batches] == [4, 12, 4]


def test_eval_opt_waves_shrink_as_episodes_stop():
    """Episodes whose evaluator says Correct drop out; the others keep batching together."""
    wf = build_workflow("eval_opt", load_prompts(), {"rounds": 3})

    def script(r):
        if r.policy == "evaluator":  # problem p0 is accepted, p1 never
            return "\\boxed{Correct}" if "0+0" in r.messages[0]["content"] else "\\boxed{Incorrect}"
        return "\\boxed{0}"
    engine = ScriptedEngine(script)
    eps = go(wf, engine, 2, 2)
    assert [len(b) for b in engine.batches] == [4, 4, 2, 2, 2, 2]
    assert [len(e.turns) for e in eps] == [2, 2, 6, 6]


def test_episodes_problem_major_and_sample_indices():
    wf = build_workflow("single", load_prompts(), {})
    eps = go(wf, ScriptedEngine(lambda r: "x"), 3, 2)
    assert [(e.problem.uid, e.sample) for e in eps] == [("p0", 0), ("p0", 1), ("p1", 0), ("p1", 1),
                                                         ("p2", 0), ("p2", 1)]


def test_replies_reach_their_own_episode():
    """With many episodes in one batch, each gets the reply to its own request."""
    wf = build_workflow("single", load_prompts(), {})
    eps = go(wf, ScriptedEngine(lambda r: "echo " + r.messages[-1]["content"].splitlines()[-1]), 5, 2)
    assert all(e.final_answer == f"echo {e.problem.prompt}" for e in eps)


class RecordingEngine:
    """Returns token ids, log-probs and a finish reason so we can check they land on the turn."""

    def __init__(self):
        self.temperatures, self.requests = [], []

    def generate(self, requests, *, temperature):
        self.temperatures.append(temperature)
        self.requests += requests
        return [GenOutput(prompt_text=f"P{i}", completion_text=f"\\boxed{{{i}}}", prompt_ids=[1, 2, i],
                          completion_ids=[7, i], logprobs=[-0.5, -0.25],
                          finish_reason="length" if r.policy == "aggregator" else "stop")
                for i, r in enumerate(requests)]


def test_engine_outputs_are_copied_onto_turns():
    wf = build_workflow("voting", load_prompts(), {})
    engine = RecordingEngine()
    (ep,) = go(wf, engine, 1, 1, temperature=0.3)
    assert engine.temperatures == [0.3, 0.3]
    assert [t.index for t in ep.turns] == [0, 1, 2, 3]
    g1 = ep.turns[1]
    assert (g1.prompt_text, g1.completion_text, g1.prompt_ids, g1.completion_ids, g1.logprobs) == \
        ("P1", "\\boxed{1}", [1, 2, 1], [7, 1], [-0.5, -0.25])
    assert ep.turns[3].truncated and not ep.turns[0].truncated


def test_max_new_tokens_is_asked_per_role():
    wf = build_workflow("voting", load_prompts(), {})
    engine = RecordingEngine()
    go(wf, engine, 1, 1, mnt=lambda role: {"generator": 40, "aggregator": 5}[role])
    assert [r.max_new_tokens for r in engine.requests] == [40, 40, 40, 5]


def test_on_wave_reports_batch_sizes():
    wf = build_workflow("voting", load_prompts(), {})
    sizes = []
    go(wf, ScriptedEngine(lambda r: "\\boxed{1}"), 2, 2, on_wave=sizes.append)
    assert sizes == [12, 4]


class Nested(Workflow):
    """Calls behind two levels of gather, then one more: still one wave per level."""

    name = "nested"
    roles = ("a", "b")

    async def pair(self, team, i):
        x, y = await asyncio.gather(team.call("a", [user("x")], slot=f"a{i}"),
                                    team.call("a", [user("y")], slot=f"a{i}"))
        return x + y

    async def run(self, problem, team):
        outs = await asyncio.gather(*(self.pair(team, i) for i in range(2)))
        return await team.call("b", [user("".join(outs))])


def test_nested_gathers_batch_as_one_wave():
    engine = ScriptedEngine(lambda r: "z")
    eps = go(Nested({}), engine, 2, 2)
    assert [len(b) for b in engine.batches] == [16, 4]
    assert [t.slot for t in eps[0].turns] == ["a0", "a0", "a1", "a1", "b"]
    assert eps[0].final_answer == "z"


class Boom(Workflow):
    name = "boom"
    roles = ("a",)

    async def run(self, problem, team):
        await team.call("a", [user("x")])
        raise RuntimeError(f"workflow bug on {problem.uid}")


def test_workflow_errors_propagate():
    with pytest.raises(RuntimeError, match="workflow bug on p0"):
        go(Boom({}), ScriptedEngine(lambda r: "z"), 2, 1)


class ShortEngine:
    def generate(self, requests, *, temperature):
        return [GenOutput("p", "c")] * (len(requests) - 1)


def test_engine_returning_too_few_outputs_fails_loudly():
    wf = build_workflow("single", load_prompts(), {})
    with pytest.raises(ValueError):
        go(wf, ShortEngine(), 1, 2)


def test_no_problems_no_episodes():
    wf = build_workflow("single", load_prompts(), {})
    engine = ScriptedEngine(lambda r: "z")
    assert go(wf, engine, 0, 4) == [] and engine.batches == []


class Uneven(Workflow):
    """Some episodes reach their call two loop passes later than others (extra async hops)."""

    name = "uneven"
    roles = ("a",)

    async def run(self, problem, team):
        if problem.uid == "p1":
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        return await team.call("a", [user("x")])


def test_late_episodes_still_join_the_wave():
    engine = ScriptedEngine(lambda r: "z")
    go(Uneven({}), engine, 2, 2)
    assert [len(b) for b in engine.batches] == [4]
