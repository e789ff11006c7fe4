"""debate (MAPoRL): the discounted future-mean reward and the incentives by hand, and the
workflow's turns, prompts, final answer and per-turn rewards on a scripted engine."""
from __future__ import annotations

import pytest

from rolecall.config import RewardCfg, load_config
from rolecall.testing import ScriptedEngine
from rolecall.policies.routing import build_routing
from rolecall.rewards.verifier import build_verifier
from rolecall.rollout import rollout
from rolecall.algo.credit import advantages, credit
from rolecall.algo.scoring import score
from rolecall.types import Problem
from rolecall.workflows import build_workflow, load_prompts
from rolecall.workflows.debate import future_mean_rewards, incentives

PROBLEM = Problem(uid="p", prompt="6*7", answer="42")


def test_future_mean_rewards_by_hand():
    scores = [[1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]
    r = future_mean_rewards(scores, 0.5)
    tail0 = 0.5 * (2 / 3) + 0.25 * 1.0
    assert r[0] == pytest.approx([(1 + tail0) / 1.75, tail0 / 1.75, tail0 / 1.75])
    assert r[1] == pytest.approx([1.5 / 1.5, 1.5 / 1.5, 0.5 / 1.5])
    assert r[2] == [1.0, 1.0, 1.0]
    # unscorable: its own turn gets None, and it leaves the round mean
    r = future_mean_rewards([[1.0, None], [None, None], [0.0, 1.0]], 0.5)
    assert r[0] == pytest.approx([(1 + 0.25 * 0.5) / 1.25, None])  # round 1 has no mean: no term
    assert r[1] == [None, None]


def test_incentives_by_hand():
    alphas = (1.0, 10.0, 100.0, 1000.0)
    out = incentives([[0.0, 1.0, 1.0], [1.0, 1.0, 0.0]], alphas)
    # agent0 corrected itself; agent1 stayed right while 1 of its 2 peers turned right;
    # agent2 left a correct consensus (2 of 3 right before).
    assert out == [[0.0, 0.0, 0.0], [1.0, 5.0, -100.0]]
    # right -> wrong while both peers were wrong: persuaded to a wrong answer.
    assert incentives([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]], alphas)[1] == [-1000.0, 0.0, 0.0]
    assert incentives([[1.0, 0.0], [None, 1.0]], alphas)[1] == [0.0, 1.0]  # unscorable: no term for it


def _debate(options, script, routes=None, group=1):
    wf = build_workflow("debate", load_prompts("math"), options)
    engine = ScriptedEngine(script)
    eps = rollout(wf, [PROBLEM], group, engine, routes or {r: r for r in wf.roles}, lambda r: 16, 1.0)
    return wf, eps, engine


def test_a_debate_episode_turns_prompts_final_answer_and_rewards():
    said = {("agent0", 0): "\\boxed{41}", ("agent1", 0): "\\boxed{42}", ("agent2", 0): "\\boxed{42}",
            ("agent0", 1): "\\boxed{42}", ("agent1", 1): "\\boxed{42}", ("agent2", 1): "\\boxed{40}"}

    calls = []

    def script(req):  # the slot is not in the request: answer in call order (round-major)
        calls.append(req.messages[-1]["content"])
        rnd, agent = divmod(len(calls) - 1, 3)
        return said[(f"agent{agent}", rnd)]

    wf, (ep,), engine = _debate({"n_agents": 3, "rounds": 2, "gamma": 0.5}, script)
    assert [(t.role, t.slot) for t in ep.turns] == [("debater", f"agent{a}") for _ in range(2) for a in range(3)]
    assert [len(b) for b in engine.batches] == [3, 3]  # each round is one wave
    second = calls[3]  # agent0's round-1 prompt: its own answer first, then the peers numbered 2, 3
    assert "1: \\boxed{41}\n2: \\boxed{42}\n3: \\boxed{42}" in second
    assert ep.final_answer == "\\boxed{42}"  # majority of the last round
    v = build_verifier(RewardCfg(math_checker="strict"))
    try:
        score([ep], v)
    finally:
        v.close()
    assert ep.grades("answers") == [0.0, 1.0, 1.0, 1.0, 1.0, 0.0]
    credit([ep], wf)
    a = (0.1, 0.1, 0.1, 0.1)
    base = future_mean_rewards([[0.0, 1.0, 1.0], [1.0, 1.0, 0.0]], 0.5)
    extra = incentives([[0.0, 1.0, 1.0], [1.0, 1.0, 0.0]], a)
    want = {t: base[t // 3][t % 3] + extra[t // 3][t % 3] for t in range(6)}
    assert ep.turn_rewards == pytest.approx(want)
    assert wf.metrics([ep]) == pytest.approx({"debate/round0_acc": 2 / 3, "debate/round1_acc": 2 / 3,
                                              "debate/fixed": 1 / 3, "debate/broken": 1 / 3})
    turns, adv, _ = advantages([ep], "grpo", "slot")
    assert len(adv) == 6


def test_agents_as_roles_route_per_agent_and_peers_can_be_frozen():
    wf = build_workflow("debate", load_prompts("math"), {"agents": "roles", "n_agents": 2, "rounds": 1})
    assert wf.roles == ("agent0", "agent1")
    assert sorted(build_routing("isolated", wf.roles, None).adapters) == ["agent0", "agent1"]
    cfg = load_config(None, ["workflow.name=debate", "workflow.options={agents: roles, n_agents: 2}",
                             "routing={agent0: learner, agent1: base}"])
    assert cfg.routing == {"agent0": "learner", "agent1": "base"}
    _, (ep,), _ = _debate({"agents": "roles", "n_agents": 2, "rounds": 1}, lambda r: "\\boxed{42}")
    assert [(t.role, t.slot) for t in ep.turns] == [("agent0", "agent0"), ("agent1", "agent1")]


def test_a_scorer_role_annotates_the_peers():
    calls = []

    def script(req):
        calls.append((req.policy, req.messages[-1]["content"]))
        if req.policy == "scorer":
            return "\\boxed{Correct} fine" if "42" in req.messages[-1]["content"] else "\\boxed{Incorrect} no"
        return "\\boxed{42}" if len(calls) != 1 else "\\boxed{7}"

    wf, (ep,), _ = _debate({"n_agents": 2, "rounds": 2, "peer_scores": "scorer"}, script)
    assert wf.roles == ("debater", "scorer")
    assert [t.role for t in ep.turns] == ["debater", "debater", "scorer", "scorer", "debater", "debater"]
    agent1_round1 = [text for policy, text in calls if policy == "debater"][3]
    assert "2: \\boxed{7} (checked: incorrect)" in agent1_round1


def test_the_run_verifier_annotates_the_peers_in_one_batch_per_round():
    """peer_scores: verifier grades each answer during the episode (no LLM turn): one batched
    check per round, served before the next round's model calls."""
    calls, checked = [], []

    def script(req):
        calls.append(req.messages[-1]["content"])
        return "\\boxed{7}" if len(calls) == 1 else "\\boxed{42}"

    def check(texts, problems):
        checked.append(list(texts))
        return [1.0 if "42" in t else (None if "?" in t else 0.0) for t in texts]

    wf = build_workflow("debate", load_prompts("math"), {"n_agents": 2, "rounds": 3, "peer_scores": "verifier"})
    assert wf.roles == ("debater",)
    (ep,) = rollout(wf, [PROBLEM], 1, ScriptedEngine(script), {"debater": "debater"}, lambda r: 16, 1.0,
                    check=check)
    assert [t.role for t in ep.turns] == ["debater"] * 6
    assert checked == [["\\boxed{7}", "\\boxed{42}"], ["\\boxed{42}", "\\boxed{42}"]]
    assert "2: \\boxed{7} (checked: incorrect)" in calls[3]  # agent1, round 1, sees agent0's wrong draft
    assert "2: \\boxed{42} (checked: correct)" in calls[2]


def test_team_check_without_a_verifier_names_the_problem():
    wf = build_workflow("debate", load_prompts("math"), {"n_agents": 2, "rounds": 2, "peer_scores": "verifier"})
    with pytest.raises(Exception, match="no verifier"):
        rollout(wf, [PROBLEM], 1, ScriptedEngine(lambda r: "\\boxed{42}"), {"debater": "debater"}, lambda r: 16, 1.0)


@pytest.mark.parametrize("option, value", [("agents", "crowd"), ("peer_scores", "oracle"), ("gamma", -1),
                                           ("alpha_correct", "high"), ("n_agents", 0), ("answer_from", "last")])
def test_bad_options_are_named(option, value):
    with pytest.raises(ValueError, match=f"workflow.options.{option}"):
        build_workflow("debate", load_prompts("math"), {option: value})


def test_answer_from_lets_the_majority_read_replies_without_a_box():
    last = iter(["I get 41", "It is 42.", "42", "41 is wrong, 42", "so 40", "The answer is 42"])
    script = lambda r: next(last)  # noqa: E731
    _, (ep,), _ = _debate({"n_agents": 3, "rounds": 2, "answer_from": "boxed_or_last_number"}, script)
    assert ep.final_answer == "41 is wrong, 42"  # 42 twice (agents 0 and 2) in the last round; the first of them
    # boxed only: nobody boxed, so the final answer is agent 0's whatever the others say
    last = iter(["I get 41", "It is 42.", "42", "I get 41", "It is 42.", "42"])
    _, (ep,), _ = _debate({"n_agents": 3, "rounds": 2}, lambda r: next(last))
    assert ep.final_answer == "I get 41"
