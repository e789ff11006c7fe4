"""score() and advantages(): explicit group ids from (problem, slot|role), values checked by hand."""
from __future__ import annotations

import math

import pytest

from rolecall.rewards import Score
from rolecall.rewards.verifier import MathVerifier
from rolecall.algo.credit import advantages, flatten, group_id
from rolecall.algo.scoring import score
from rolecall.types import Episode, Problem, Turn

EPS = 1e-6
VOTING_SLOTS = [("generator", "generator0"), ("generator", "generator1"), ("generator", "generator2"),
                ("aggregator", "aggregator")]


def voting_episode(uid: str, sample: int, reward):
    p = Problem(uid=uid, prompt="q", answer="1")
    turns = [Turn(role=r, slot=s, policy=r, prompt_text="", completion_text="", index=i)
             for i, (r, s) in enumerate(VOTING_SLOTS)]
    return Episode(problem=p, sample=sample, turns=turns, reward=reward)


def by_slot(turns, adv):
    out: dict[str, list[float]] = {}
    for t, a in zip(turns, adv):
        out.setdefault(t.slot, []).append(a)
    return out


def test_flatten_is_episode_major_call_order():
    eps = [voting_episode("p", g, 1.0) for g in range(2)]
    turns, owners = flatten(eps)
    assert [t.slot for t in turns] == [s for _, s in VOTING_SLOTS] * 2
    assert owners == [eps[0]] * 4 + [eps[1]] * 4


def test_group_id_keys():
    ep = voting_episode("p7", 0, 1.0)
    t = ep.turns[1]
    ep.group = 3  # the step's fourth drawn problem
    assert group_id(ep, t, "slot") == (3, "p7", "generator1")
    assert group_id(ep, t, "role") == (3, "p7", "generator")
    assert group_id(ep, t, "episode") == (3, "p7")
    assert group_id(ep, t, "turn") == (3, "p7", t.index, "generator")
    with pytest.raises(ValueError, match="algo.group_by"):
        group_id(ep, t, "agent")


def test_a_problem_drawn_twice_in_one_step_is_two_groups():
    """At an epoch boundary a step can draw one problem twice: two groups of G, not one of 2G.
    Draw 0 rewards [1, 0], draw 1 rewards [1, 1]: draw 1 has no spread, so advantage 0 there;
    merged into one group of 4 it would have got (1 - 0.75) / std > 0."""
    from rolecall.testing import ScriptedEngine
    from rolecall.rollout import rollout
    from rolecall.workflows import build_workflow, load_prompts

    p = Problem(uid="p", prompt="1+1", answer="2")
    wf = build_workflow("single", load_prompts("math"), {})
    eps = rollout(wf, [p, p], 2, ScriptedEngine(lambda r: "x"), {"generator": "generator"}, lambda r: 8, 0.7)
    assert [ep.group for ep in eps] == [0, 0, 1, 1]
    for ep, r in zip(eps, [1.0, 0.0, 1.0, 1.0]):
        ep.reward = r
    _, adv, m = advantages(eps, "grpo", None)
    assert m["adv/groups"] == 2
    assert adv[2:] == [0.0, 0.0]
    assert adv[0] > 0 > adv[1]


def test_grpo_groups_by_problem_and_slot():
    """p: rewards [1, 0, 0] -> every slot group is {1, 0, 0}; q: all 1 -> all 0."""
    eps = [voting_episode("p", g, r) for g, r in enumerate([1.0, 0.0, 0.0])]
    eps += [voting_episode("q", g, 1.0) for g in range(3)]
    turns, adv, m = advantages(eps, "grpo", None)
    # mean 1/3; unbiased var = (4/9 + 1/9 + 1/9) / 2 = 1/3
    hi, lo = (2 / 3) / (math.sqrt(1 / 3) + EPS), (-1 / 3) / (math.sqrt(1 / 3) + EPS)
    assert len(adv) == 24
    assert adv[:12] == pytest.approx([hi] * 4 + [lo] * 4 + [lo] * 4)  # p, samples 0..2
    assert adv[12:] == [0.0] * 12  # q
    assert m["adv/groups"] == 8  # 2 problems x 4 slots
    assert m["adv/mixed_group_frac"] == 0.5


def test_grpo_slot_groups_are_separate_from_each_other():
    """Each generator slot is its own group: a slot whose rewards differ only there gets its own stats."""
    eps = [voting_episode("p", g, r) for g, r in enumerate([1.0, 0.0])]
    eps[1].turns = eps[1].turns[:1] + eps[1].turns[3:]  # sample 1 lacks generator1/2
    turns, adv, _ = advantages(eps, "grpo", "slot")
    got = by_slot(turns, adv)
    a = 0.5 / (math.sqrt(0.5) + EPS)
    assert got["generator0"] == pytest.approx([a, -a])
    assert got["aggregator"] == pytest.approx([a, -a])
    assert got["generator1"] == got["generator2"] == [0.0]  # group of one


def test_agentwise_groups_by_role():
    """All generator turns of a problem form one group of 9; the aggregator one of 3."""
    eps = [voting_episode("p", g, r) for g, r in enumerate([1.0, 0.0, 0.0])]
    turns, adv, m = advantages(eps, "agentwise", None)
    # generators: [1,1,1,0,0,0,0,0,0] mean 1/3; var = (3*4/9 + 6*1/9)/8 = 1/4; std 1/2
    g_hi, g_lo = (2 / 3) / (0.5 + EPS), (-1 / 3) / (0.5 + EPS)
    a_hi, a_lo = (2 / 3) / (math.sqrt(1 / 3) + EPS), (-1 / 3) / (math.sqrt(1 / 3) + EPS)
    got = by_slot(turns, adv)
    for s in ("generator0", "generator1", "generator2"):
        assert got[s] == pytest.approx([g_hi, g_lo, g_lo])
    assert got["aggregator"] == pytest.approx([a_hi, a_lo, a_lo])
    assert m["adv/groups"] == 2


def test_group_by_overrides_the_estimators_default():
    eps = [voting_episode("p", g, r) for g, r in enumerate([1.0, 0.0, 0.0])]
    _, grpo_role, _ = advantages(eps, "grpo", "role")
    _, agentwise, _ = advantages(eps, "agentwise", None)
    assert grpo_role == agentwise
    _, whole, m = advantages(eps, "grpo", "episode")
    # 12 turns in one group: [1]*4 + [0]*8, mean 1/3, var = (4*4/9 + 8*1/9)/11 = 24/99
    assert whole[0] == pytest.approx((2 / 3) / (math.sqrt(24 / 99) + EPS))
    assert m["adv/groups"] == 1


def test_unscorable_episodes_get_zero_and_leave_the_stats():
    """Rewards [1, None, 0]: the None episode gets 0; the others are normalised as a pair."""
    eps = [voting_episode("p", g, r) for g, r in enumerate([1.0, None, 0.0])]
    turns, adv, m = advantages(eps, "grpo", None)
    a = 0.5 / (math.sqrt(0.5) + EPS)
    assert adv[:4] == pytest.approx([a] * 4)
    assert adv[4:8] == [0.0] * 4
    assert adv[8:] == pytest.approx([-a] * 4)
    assert m["adv/unscorable"] == 4  # counted per turn, never silently scored


def test_unknown_estimator():
    with pytest.raises(ValueError, match="unknown advantage estimator 'ppo'"):
        advantages([voting_episode("p", 0, 1.0)], "ppo", None)


def _ep(final: str, gold: str) -> Episode:
    return Episode(problem=Problem(uid="u", prompt="q", answer=gold), sample=0, final_answer=final)


def test_score_grades_with_math_verifier():
    eps = [_ep("so \\boxed{42}", "42"), _ep("\\boxed{41}", "42"), _ep("no box here", "42"),
           _ep("\\boxed{\\frac{1}{2}}", "0.5"), _ep("<think>\\boxed{1}</think> \\boxed{2}", "2"),
           _ep("\\boxed{3}", "")]
    m = score(eps, MathVerifier(format_penalty=0.25, checker="strict"))
    assert [e.reward for e in eps] == [1.0, 0.0, -0.25, 1.0, 1.0, None]
    assert [e.status for e in eps] == ["ok", "wrong", "no_answer", "ok", "ok", "unscorable"]
    assert m == pytest.approx({"reward/status_ok": 3 / 6, "reward/status_wrong": 1 / 6,
                               "reward/status_no_answer": 1 / 6, "reward/status_unscorable": 1 / 6})


class _Recorder:
    """A verifier that records what it was asked to grade."""

    name = "rec"

    def __init__(self):
        self.calls = []

    def score_many(self, completions, problems):
        self.calls.append([(c, p.answer) for c, p in zip(completions, problems)])
        return [Score(float(len(c)), "ok") for c in completions]


def test_score_grades_each_distinct_text_once_and_graded_lists_too():
    """Texts a workflow queued with team.grade are graded; the final answer among them is not graded twice."""
    ep = _ep("bb", "7")
    ep.graded = {"candidates": ["a", "bb", "a"]}
    ep.info.update(selected=2)
    other = _ep("bb", "7")  # same problem, same text: one grading serves both
    rec = _Recorder()
    score([ep, other], rec)
    assert rec.calls == [[("bb", "7"), ("a", "7")]]
    assert ep.reward == other.reward == 2.0
    assert ep.grades("candidates") == [1.0, 2.0, 1.0] and other.grades("candidates") == []


def test_score_empty():
    assert score([], _Recorder()) == {}
