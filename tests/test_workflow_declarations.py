"""What a workflow declares and the trainer follows: roles that depend on options (routed per
instance), extra role diagnostics, every estimator on every workflow; and the chain workflow."""
from __future__ import annotations

import math

import pytest

from rolecall.advantages import ESTIMATORS, check_estimators
from rolecall.testing import ScriptedEngine
from rolecall.rollout import rollout
from rolecall.workflows import WORKFLOWS, Workflow, build_workflow, load_prompts
from workflow_helpers import MATH_WORKFLOWS, PROBLEM, prompts_for, roles, run, score_strict


@pytest.mark.parametrize("estimator", sorted(ESTIMATORS))
@pytest.mark.parametrize("name", MATH_WORKFLOWS)
def test_every_estimator_trains_every_workflow(name, estimator):
    """Scripted episodes of every shipped workflow, scored, through every estimator: one
    finite advantage per turn, nonzero where the group's outcomes differ."""
    from itertools import count

    from rolecall.algo.credit import advantages, credit
    calls = count()
    # Alternate right and wrong answers so every group holds both outcomes.
    eps, _ = run(name, lambda r: "\\boxed{42}" if next(calls) % 2 else "\\boxed{7}", group_size=4)
    score_strict(eps)
    wf = build_workflow(name, prompts_for(name), {})
    credit(eps, wf)
    plan = estimator
    if getattr(ESTIMATORS[estimator], "needs_counterfactuals", False):
        # Counterfactual credit is for the roles whose default the workflow re-reads; any other
        # role asking for it is refused before training, naming the roles that can have it.
        if not wf.counterfactual_roles:
            with pytest.raises(ValueError, match="re-reads no default"):
                check_estimators(estimator, {}, wf)
            return
        plan = {**{r: estimator for r in wf.counterfactual_roles}, "*": "grpo"}
        check_estimators(plan, {}, wf)
    turns, adv, m = advantages(eps, plan, None, workflow=wf)
    assert len(adv) == len(turns) == sum(len(ep.turns) for ep in eps)
    assert all(math.isfinite(a) for a in adv)
    assert len({ep.reward for ep in eps}) > 1, "the script must give each group both outcomes"
    if plan is estimator:
        assert any(a != 0 for a in adv), m
        return
    # Counterfactual credit moves exactly the turns that changed their episode's outcome.
    from rolecall.algo.credit import counterfactual_credits, flatten
    turns, owners = flatten(eps)
    mine = [i for i, t in enumerate(turns) if t.role in wf.counterfactual_roles]
    cf, _ = counterfactual_credits([turns[i] for i in mine], [owners[i] for i in mine], wf, {})
    assert any(c is not None for c in cf), m  # the workflow re-read some of its turns
    assert [bool(c) for c in cf] == [adv[i] != 0 for i in mine], m


def test_role_diagnostics_must_name_known_diagnostics():
    class Judged(Workflow):
        name, roles = "judged", ("judge",)
        role_diagnostics = {"judge": ("verdict_form", "vibes")}

    from rolecall.workflows import check_role_diagnostics

    with pytest.raises(ValueError, match=r"role_diagnostics of 'judge' names unknown diagnostics \['vibes'\]"):
        check_role_diagnostics(Judged({}))


def test_voting_with_a_majority_vote_has_no_aggregator_role():
    wf = build_workflow("voting", load_prompts("math"), {"aggregator": "majority", "n_voters": 3})
    assert wf.roles == ("generator",)
    answers = iter(["\\boxed{ 7 }", "\\boxed{42}", "\\boxed{7}"] * 2)
    eps, engine = run("voting", lambda r: next(answers), options={"aggregator": "majority"}, routes={"generator": "g"})
    (ep,) = eps
    assert roles(ep) == ["generator"] * 3 and ep.final_answer == "\\boxed{ 7 }"  # whitespace inside a box is not a vote
    assert [len(b) for b in engine.batches] == [3]
    with pytest.raises(ValueError, match="'llm' or 'majority'"):
        build_workflow("voting", load_prompts("math"), {"aggregator": "vote"})


def test_routing_is_checked_against_the_roles_the_options_give():
    from rolecall.config import ConfigError, load_config

    cfg = load_config(None, ["workflow.options={aggregator: majority}"])
    assert cfg.workflow.options == {"aggregator": "majority"}
    with pytest.raises(ConfigError, match="aggregator"):
        load_config(None, ["workflow.options={aggregator: majority}", "routing={generator: g, aggregator: a}"])
    with pytest.raises(ConfigError, match="aggregator"):
        load_config(None, ["workflow.options={aggregator: majority}", "rollout.max_new_tokens_by_role={aggregator: 8}"])


class Panel(Workflow):
    """n agents as n roles (agent0..agent{n-1}), each with its own policy if routed so."""

    name = "panel"

    def __init__(self, prompts=None, n_agents: int = 2) -> None:
        self.roles = tuple(f"agent{i}" for i in range(n_agents))
        super().__init__(prompts or {})

    async def run(self, problem, team):
        import asyncio

        from rolecall.workflows import user

        replies = await asyncio.gather(*(team.call(r, [user(problem.prompt)]) for r in self.roles))
        return replies[-1]


def test_roles_from_options_are_routed_per_instance():
    from rolecall.policies.routing import build_routing

    wf = Panel(n_agents=3)
    routing = build_routing("isolated", wf.roles, None)
    assert sorted(routing.adapters) == ["agent0", "agent1", "agent2"]
    eps, _ = run_wf(wf, routing.routes)
    assert [t.policy for t in eps[0].turns] == ["agent0", "agent1", "agent2"]
    with pytest.raises(ValueError, match="agent2"):
        build_routing({"agent0": "a", "agent1": "a"}, wf.roles, None)


def run_wf(wf, routes):
    engine = ScriptedEngine(lambda r: "\\boxed{1}")
    return rollout(wf, [PROBLEM], 1, engine, routes, lambda role: 8, 0.7), engine


def test_chain_is_generator_verifier_refiner_with_draft_metrics():
    replies = {"generator": iter(["\\boxed{41}", "\\boxed{42}"]),
               "verifier": iter(["\\boxed{Incorrect} off by one", "\\boxed{Incorrect} wrong"]),
               "refiner": iter(["\\boxed{42}", "\\boxed{41}"])}
    eps, engine = run("chain", lambda r: next(replies[r.policy]), group_size=2)
    assert [roles(ep) for ep in eps] == [["generator", "verifier", "refiner"]] * 2
    problem_msg, draft_msg, review_msg = engine.batches[2][0].messages
    assert PROBLEM.prompt in problem_msg["content"] and draft_msg == {"role": "assistant", "content": "\\boxed{41}"}
    assert review_msg["content"].startswith("Review: \\boxed{Incorrect} off by one")
    score_strict(eps)
    assert [ep.reward for ep in eps] == [1.0, 0.0] and [ep.grades("drafts") for ep in eps] == [[0.0], [1.0]]
    m = build_workflow("chain", load_prompts("math"), {}).metrics(eps)
    assert m == {"chain/draft_acc": 0.5, "chain/fixed": 1.0, "chain/broken": 1.0, "chain/verdict_acc": 0.5}


def _scored_chain(options, group_size=4):
    from rolecall.algo.credit import credit
    # drafts right, wrong, right, wrong; verdicts always "Correct"; finals wrong, right, right, wrong
    replies = {"generator": iter(["\\boxed{42}", "\\boxed{7}", "\\boxed{42}", "\\boxed{7}"]),
               "verifier": iter(["\\boxed{Correct} ok"] * 4),
               "refiner": iter(["\\boxed{7}", "\\boxed{42}", "\\boxed{42}", "\\boxed{7}"])}
    eps, _ = run("chain", lambda r: next(replies[r.policy]), options=options, group_size=group_size)
    wf = build_workflow("chain", load_prompts("math"), options)
    score_strict(eps)
    credit(eps, wf)
    return eps


def _advantages_by_role(eps, estimator, group_by=None):
    from rolecall.algo.credit import advantages
    turns, adv, _ = advantages(eps, estimator, group_by)
    out = {}
    for t, a in zip(turns, adv):
        out.setdefault(t.role, []).append(round(float(a), 6))
    return out


def test_chain_per_role_credit_pays_each_agent_for_its_own_job():
    eps = _scored_chain({"credit": "per_role"})
    rewards = [[ep.turn_rewards.get(t.index, ep.reward) if ep.turn_rewards else None
                for t in ep.turns] for ep in eps]
    # generator: its draft's grade; verifier: "Correct" matches a right draft only; refiner: outcome
    assert rewards == [[1.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]


def test_chain_estimators_agree_under_outcome_credit_and_differ_under_per_role_credit():
    """With one call per role, agent-wise and slot-grouped GRPO form the same groups: identical
    advantages under any credit. Under the outcome broadcast, pooling every role's turns sees
    each reward three times: the same signs, scaled only by the sample-std correction. Per-role
    credit gives each agent its own reward distribution, and pooling them changes the signs."""
    eps = _scored_chain({})
    agentwise = _advantages_by_role(eps, "agentwise")
    assert agentwise == _advantages_by_role(eps, "grpo")
    pooled = _advantages_by_role(eps, "grpo", "episode")
    for role in agentwise:
        ratio = [p / a for p, a in zip(pooled[role], agentwise[role])]
        assert max(ratio) - min(ratio) < 1e-4 and ratio[0] > 0
    eps = _scored_chain({"credit": "per_role"})
    assert _advantages_by_role(eps, "agentwise") == _advantages_by_role(eps, "grpo")
    assert _advantages_by_role(eps, "agentwise") != _advantages_by_role(eps, "grpo", "episode")
