"""Budgets: a turn over its token budget and an episode over its wall-clock
budget are cut and marked, and the rest of the batch proceeds."""
from __future__ import annotations

import asyncio
import gc
import time

import pytest
import torch

from rolecall.config import load_config
from rolecall.engines.base import GenRequest
from rolecall.testing import ScriptedEngine
from rolecall.rewards.verifier import MathVerifier
from rolecall.rollout import rollout
from rolecall.train.stack import build_stack
from rolecall.train.step import train_step
from rolecall.algo.scoring import score
from rolecall.types import Problem
from rolecall.workflows import Workflow, build_workflow, load_prompts, user


# --- token budget, end to end on the tiny model ------------------------------------------

@pytest.fixture(scope="module")
def stack(tiny_model_dir):
    """Voting with different budgets per role; a random tiny model rarely stops on its own."""
    return build_stack(load_config(None, [
        f"model.path={tiny_model_dir}", "rollout.problems_per_step=1", "rollout.group_size=2", "task.n_val=1",
        "rollout.max_new_tokens=4", "rollout.max_new_tokens_by_role={aggregator: 2}", "train.threads=2",
        "train.diagnostics=basic"]))


def test_mixed_budgets_in_one_batch_are_each_cut_at_their_own(stack):
    torch.manual_seed(0)
    budgets = [1, 5, 2, 7]
    outs = stack.engine.generate([GenRequest([user(f"{i}+{i}")], "generator", b) for i, b in enumerate(budgets)],
                                 temperature=1.0)
    for out, budget in zip(outs, budgets):
        _assert_cut_or_stopped(out.completion_ids, out.logprobs, out.finish_reason, budget, stack.engine.stop_ids)
    assert any(o.finish_reason == "length" for o in outs), "nothing hit its budget: the test would prove nothing"


def test_a_training_step_cuts_and_marks_over_budget_turns_and_still_trains(stack):
    row, episodes = train_step(stack, 1)
    turns = [t for ep in episodes for t in ep.turns]
    budget = {"generator": 4, "aggregator": 2}
    for t in turns:
        _assert_cut_or_stopped(t.completion_ids, t.logprobs, t.finish_reason, budget[t.role], stack.engine.stop_ids)
    truncated = [t for t in turns if t.truncated]
    assert truncated, "no turn hit its budget: the test would prove nothing"
    for role in budget:
        mine = [t for t in turns if t.role == role]
        assert row[f"role/{role}/truncated_frac"] == pytest.approx(sum(t.truncated for t in mine) / len(mine))
    assert row["policy/generator/rows"] > 0 and row["nonfinite/loss"] == 0  # truncated turns still train


def _assert_cut_or_stopped(ids, logprobs, finish_reason, budget, stop_ids):
    assert len(ids) == len(logprobs) <= budget
    if finish_reason == "length":
        assert len(ids) == budget and not set(ids) & set(stop_ids)
    else:
        assert finish_reason == "stop" and ids[-1] in stop_ids


# --- episode wall-clock budget, with a scripted engine ------------------------------------

class SlowEngine(ScriptedEngine):
    """A scripted engine that takes `wave_s` seconds per generate call, like a real one."""

    def __init__(self, wave_s: float) -> None:
        super().__init__(lambda r: "\\boxed{1}")
        self.wave_s = wave_s

    def generate(self, requests, *, temperature):
        time.sleep(self.wave_s)
        return super().generate(requests, temperature=temperature)


class Chatty(Workflow):
    """Problem `long` makes ten calls in a row; every other problem makes one."""

    name = "chatty"
    roles = ("a",)

    async def run(self, problem, team):
        for _ in range(10 if problem.uid == "long" else 1):
            answer = await team.call("a", [user(problem.prompt)])
        return answer


class Spinner(Workflow):
    """Problem `long` loops between awaits without ever calling a model; others make one call."""

    name = "spinner"
    roles = ("a",)

    async def run(self, problem, team):
        while problem.uid == "long":
            await asyncio.sleep(0)
        return await team.call("a", [user(problem.prompt)])


def _problems(*uids):
    return [Problem(uid=u, prompt=f"{u}?", answer="1") for u in uids]


def _run(workflow, engine, uids, budget_s, group=2):
    t0 = time.monotonic()
    eps = rollout(workflow, _problems(*uids), group, engine, {r: r for r in workflow.roles}, lambda r: 8, 0.7,
                  episode_timeout_s=budget_s)
    return eps, time.monotonic() - t0


def test_an_episode_over_its_time_budget_is_cut_and_the_others_finish():
    engine = SlowEngine(wave_s=0.05)
    eps, took = _run(Chatty({}), engine, ["short", "long", "other"], budget_s=0.2)
    long_eps = [e for e in eps if e.problem.uid == "long"]
    done = [e for e in eps if e.problem.uid != "long"]
    for ep in long_eps:
        assert ep.timed_out is True and ep.elapsed_s > 0.2
        assert ep.final_answer == "" and 1 <= len(ep.turns) < 10
        assert all(t.completion_text == "\\boxed{1}" for t in ep.turns)  # no reserved, never-served turn
    for ep in done:
        assert not ep.timed_out and ep.final_answer == "\\boxed{1}" and len(ep.turns) == 1
    # The cut episodes' pending calls were never sent: the engine saw exactly the recorded turns.
    assert sum(len(b) for b in engine.batches) == sum(len(e.turns) for e in eps)
    assert took < 1.0


def test_a_workflow_spinning_between_awaits_is_cut():
    eps, took = _run(Spinner({}), ScriptedEngine(lambda r: "\\boxed{1}"), ["long", "short"], budget_s=0.1)
    assert [e.timed_out for e in eps] == [True, True, False, False]
    assert [e.final_answer for e in eps] == ["", "", "\\boxed{1}", "\\boxed{1}"]
    assert took < 1.0


def test_parallel_calls_of_a_timed_out_episode_are_dropped_together(caplog):
    """Voting: the generator wave outlasts the budget, so no aggregator call is sent."""
    engine = SlowEngine(wave_s=0.15)
    eps, _ = _run(build_workflow("voting", load_prompts(), {}), engine, ["p"], budget_s=0.1)
    gc.collect()  # asyncio reports an unretrieved task exception when the task is collected
    assert [len(b) for b in engine.batches] == [6]
    assert all(e.timed_out and [t.role for t in e.turns] == ["generator"] * 3 for e in eps)
    assert "never retrieved" not in caplog.text


def test_without_a_budget_nothing_is_cut():
    eps, _ = _run(Chatty({}), SlowEngine(wave_s=0.0), ["long"], budget_s=None, group=1)
    assert len(eps[0].turns) == 10 and not eps[0].timed_out


def test_a_timed_out_episode_is_scored_as_answerless():
    eps, _ = _run(Spinner({}), ScriptedEngine(lambda r: "\\boxed{1}"), ["long", "short"], budget_s=0.05)
    score(eps, MathVerifier(checker="strict"))
    assert [(e.reward, e.status) for e in eps] == [(0.0, "no_answer")] * 2 + [(1.0, "ok")] * 2


def test_the_config_budget_reaches_the_training_rollout(stack):
    """A budget no episode can meet: every episode is cut, counted, and the step still completes."""
    cfg = stack.cfg
    stack.cfg = cfg.model_copy(update={"rollout": cfg.rollout.model_copy(update={"episode_timeout_s": 1e-9})})
    try:
        row, episodes = train_step(stack, 2)
    finally:
        stack.cfg = cfg
    assert row["rollout/timed_out_frac"] == 1.0
    assert all(ep.timed_out and ep.reward == 0.0 for ep in episodes)
