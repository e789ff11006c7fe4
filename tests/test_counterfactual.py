"""Counterfactual credit: each default re-read from a scored episode, the advantages it gives (worked
by hand), per-role estimators, and the config checks that refuse it where nothing can be re-read."""
from __future__ import annotations

import math

import pytest

from rolecall.algo.credit import advantages
from rolecall.config import ConfigError, load_config
from rolecall.types import Episode, Problem, Turn
from rolecall.workflows import build_workflow, workflow_prompts

P = Problem(uid="p", prompt="1 + 1", answer="2")


def _wf(name: str, **options):
    return build_workflow(name, workflow_prompts(name, None), options)


def _turn(i: int, role: str, slot: str, text: str = "") -> Turn:
    return Turn(role=role, slot=slot, policy=role, prompt_text="", completion_text=text, index=i)


def _voting(grades, answers, selected, sample=0) -> Episode:
    turns = [_turn(i, "generator", f"generator{i}") for i in range(3)] + [_turn(3, "aggregator", "aggregator")]
    return Episode(problem=P, sample=sample, turns=turns, reward=grades[selected - 1],
                   info={"candidate_answers": answers, "selected": selected},
                   graded_rewards={"candidates": list(grades)})


def test_the_aggregators_default_is_the_fallback_rule():
    first = _wf("voting")
    # first right, picked the second (wrong): the rule would have been right -> -1
    assert first.counterfactuals(_voting([1.0, 0.0, 0.0], ["2", "3", "4"], 2)) == {3: 1.0}
    # picked the third (right), first wrong -> the rule's outcome 0, credit +1
    assert first.counterfactuals(_voting([0.0, 0.0, 1.0], ["3", "4", "2"], 3)) == {3: 0.0}
    majority = _wf("voting", fallback="majority")
    # answers 3, 3, 5: the majority is candidate 1 (graded 0); the aggregator's pick of 3 was right
    assert majority.counterfactuals(_voting([0.0, 0.0, 1.0], ["3", "3", "5"], 3)) == {3: 0.0}


def test_aggregator_credit_and_its_advantages_by_hand():
    # One problem, four samples: credits -1 (beat by the rule), 0 (picked as the rule), +1, 0 (all agree).
    eps = [_voting([1.0, 0.0, 0.0], ["2", "3", "4"], 2, 0), _voting([1.0, 0.0, 0.0], ["2", "3", "4"], 1, 1),
           _voting([0.0, 0.0, 1.0], ["3", "4", "2"], 3, 2), _voting([1.0, 1.0, 1.0], ["2", "2", "2"], 2, 3)]
    turns, adv, m = advantages(eps, {"aggregator": "counterfactual", "*": "grpo"}, None, None, _wf("voting"))
    agg = [a for t, a in zip(turns, adv) if t.role == "aggregator"]
    rms = math.sqrt((1 + 0 + 1 + 0) / 4)  # the group's scale: credits stay signed, zeros stay zero
    assert agg == pytest.approx([-1 / rms, 0.0, 1 / rms, 0.0], abs=1e-5)
    assert m["role/aggregator/cf_zero_credit"] == 0.5 and m["role/aggregator/cf_unavailable"] == 0.0
    # the voters keep GRPO by slot on the outcome 0, 1, 1, 1: mean 0.75, unbiased std 0.5
    gen0 = [a for t, a in zip(turns, adv) if t.slot == "generator0"]
    assert gen0 == pytest.approx([-1.5, 0.5, 0.5, 0.5], abs=1e-4)
    assert "adv/counterfactual/groups" in m and "adv/grpo/groups" in m


def test_a_group_that_always_beat_its_default_keeps_a_positive_advantage():
    eps = [_voting([0.0, 0.0, 1.0], ["3", "4", "2"], 3, s) for s in range(4)]  # +1 every time
    turns, adv, _ = advantages(eps, {"aggregator": "counterfactual"}, None, None, _wf("voting"))
    assert [a for t, a in zip(turns, adv) if t.role == "aggregator"] == pytest.approx([1.0] * 4, abs=1e-5)


def test_a_voter_left_out_of_a_majority_ballot():
    wf = _wf("voting", aggregator="majority")
    turns = [_turn(i, "generator", f"generator{i}") for i in range(3)]
    # 4, 7, 7 (right, wrong, wrong): the majority picks 7 (0). Without voter 2 or 3 the tie 4-7 goes to 4 (1):
    # each of them cost the outcome -1; without voter 1 it is still 7: credit 0.
    ep = Episode(problem=P, sample=0, turns=turns, reward=0.0, info={"candidate_answers": ["4", "7", "7"]},
                 graded_rewards={"candidates": [1.0, 0.0, 0.0]})
    assert wf.counterfactuals(ep) == {0: 0.0, 1: 1.0, 2: 1.0}
    assert wf.counterfactual_roles == ("generator",) and _wf("voting").counterfactual_roles == ("aggregator",)


def _eval_opt(verdicts, drafts, sample=0) -> Episode:
    turns = []
    for k in range(len(verdicts)):
        turns += [_turn(2 * k, "generator", "generator"), _turn(2 * k + 1, "evaluator", "evaluator")]
    return Episode(problem=P, sample=sample, turns=turns, reward=drafts[-1], info={"verdicts": list(verdicts)},
                   graded_rewards={"judged": list(drafts)})


def test_the_evaluators_default_is_to_accept():
    wf = _wf("eval_opt", rounds=2)
    # rejected a right first draft, the revision was wrong: accepting would have kept 1 -> credit -1
    assert wf.counterfactuals(_eval_opt([False, True], [1.0, 0.0])) == {1: 1.0, 3: 0.0}
    # rejected a wrong draft and the revision was right: +1; the last verdict changes nothing
    assert wf.counterfactuals(_eval_opt([False, False], [0.0, 1.0])) == {1: 0.0, 3: 1.0}
    # accepted at once: the default does the same
    assert wf.counterfactuals(_eval_opt([True], [1.0])) == {1: 1.0}
    eps = [_eval_opt([False, True], [1.0, 0.0], 0), _eval_opt([False, False], [0.0, 1.0], 1),
           _eval_opt([True], [1.0], 2), _eval_opt([None, True], [0.0, 0.0], 3)]  # unparseable verdict, no change
    turns, adv, m = advantages(eps, {"evaluator": "counterfactual", "*": "grpo"}, None, None, wf)
    ev = [a for t, a in zip(turns, adv) if t.role == "evaluator"]
    # credits: -1, 0 | +1, 0 | 0 | 0, 0 over one group (the role's turns on one problem): rms = sqrt(2 / 7)
    rms = math.sqrt(2 / 7)
    assert ev == pytest.approx([-1 / rms, 0, 1 / rms, 0, 0, 0, 0], abs=1e-5)
    assert m["role/evaluator/cf_zero_credit"] == pytest.approx(5 / 7)


def test_a_debaters_default_is_its_previous_answer_in_the_last_round():
    wf = _wf("debate", n_agents=3, rounds=2)
    box = lambda x: f"so \\boxed{{{x}}}"  # noqa: E731
    turns = [_turn(i, "debater", f"agent{i % 3}", box(a)) for i, a in enumerate(["2", "3", "3", "2", "2", "3"])]
    ep = Episode(problem=P, sample=0, turns=turns, reward=1.0, info={"debate_turns": [[0, 1, 2], [3, 4, 5]]},
                 graded_rewards={"answers": [1.0, 0.0, 0.0, 1.0, 1.0, 0.0]})
    # final majority 2, 2, 3 -> 2 (right). Agent 0 back to its 2: no change. Agent 1 back to its 3: the ballot
    # 2, 3, 3 elects 3 (wrong): agent 1's switch earned +1. Agent 2 back to its 3: 2, 2, 3 -> 2: no change.
    assert wf.counterfactuals(ep) == {3: 1.0, 4: 0.0, 5: 1.0}
    turns_, adv, m = advantages([ep], {"debater": "counterfactual"}, None, None, wf)
    assert m["role/debater/cf_unavailable"] == 0.5  # round 0's turns shaped what the others read: not re-read
    assert [a for t, a in zip(turns_, adv) if t.index == 4][0] > 0 and adv[:3] == [0.0, 0.0, 0.0]


def test_an_unscorable_episode_gives_no_credit():
    ep = _voting([1.0, 0.0, 0.0], ["2", "3", "4"], 2)
    ep.reward = None
    turns, adv, m = advantages([ep], {"aggregator": "counterfactual"}, None, None, _wf("voting"))
    assert adv[3] == 0.0 and m["role/aggregator/cf_unavailable"] == 1.0


def test_the_config_takes_an_estimator_per_role_and_refuses_what_cannot_be_read():
    cfg = load_config(None, ["algo.estimator={aggregator: counterfactual, '*': grpo}"])
    assert cfg.algo.estimator == {"aggregator": "counterfactual", "*": "grpo"}
    with pytest.raises(ConfigError, match=r"counterfactual credit for role\(s\) \['generator'\].*aggregator: counterfactual"):
        load_config(None, ["algo.estimator=counterfactual"])
    with pytest.raises(ConfigError, match=r"\['judge'\] are not roles of 'voting'"):
        load_config(None, ["algo.estimator={judge: counterfactual}"])
    with pytest.raises(ConfigError, match="give the options by estimator"):
        load_config(None, ["algo.estimator={aggregator: softrank}", "algo.estimator_options={tau: 0.8}"])
    ok = load_config(None, ["algo.estimator={aggregator: softrank}", "algo.estimator_options={softrank: {tau: 0.8}}"])
    assert ok.algo.estimator_options == {"softrank": {"tau": 0.8}}
    with pytest.raises(ConfigError, match="re-reads no default"):
        load_config("examples/orch_workers", ["algo.estimator={synthesizer: counterfactual}"])


def test_the_resume_fingerprint_records_the_estimator_and_reads_older_checkpoints():
    from rolecall.rundir.fingerprint import differences

    saved = {"credit": {"estimator": '"grpo"'}}
    assert differences(saved, {"credit": {"estimator": '{"aggregator": "counterfactual"}'}})
    assert differences({}, {"credit": {"estimator": '"grpo"'}}) == []  # saved before the field existed


def test_a_run_trains_its_aggregator_on_counterfactual_credit(tmp_path):
    import rolecall

    cfg = rolecall.make_config(None, {"algo.estimator": {"aggregator": "counterfactual", "*": "grpo"},
                                      "train.steps": 2, "task.n_val": 4, "rollout.problems_per_step": 2,
                                      "rollout.group_size": 2, "train.val_every": 2})
    run = rolecall.train_run(cfg, tmp_path / "r")
    steps = [r for r in run.metrics if "adv/counterfactual/groups" in r]
    assert len(steps) == 2 and all("role/aggregator/cf_unavailable" in r for r in steps)
    assert all(r["adv/counterfactual/groups"] == 2 for r in steps)  # one aggregator group per problem


def test_a_voter_under_an_llm_aggregator_is_replayed_without_its_ballot():
    import asyncio

    from rolecall.types import Reply

    wf = _wf("voting")
    turns = [_turn(i, "generator", f"generator{i}", f"it is \\boxed{{{a}}}") for i, a in enumerate(["2", "7", "5"])]
    ep = Episode(problem=P, sample=0, turns=turns + [_turn(3, "aggregator", "aggregator")], reward=1.0,
                 info={"candidate_answers": ["2", "7", "5"], "selected": 1},
                 graded_rewards={"candidates": [1.0, 0.0, 0.0]})

    class Team:
        asked: list = []

        async def call(self, role, messages, slot=None):
            self.asked.append((role, messages[0]["content"]))
            return Reply("\\boxed{2}", 9)  # picks the second of the two it is shown

    team = Team()
    # without voter 0 the aggregator sees 7 and 5 and picks the second: 5
    assert asyncio.run(wf.replay(ep, 0, team)) == "it is \\boxed{5}"
    role, prompt = team.asked[0]
    assert role == "aggregator" and "\\boxed{7}" in prompt and "\\boxed{2}" not in prompt
    assert asyncio.run(wf.replay(ep, 3, team)) is None  # the aggregator's own turn is re-read, not replayed
    assert wf.replay_roles == ("generator",) and 0 not in wf.counterfactuals(ep)


def test_replays_are_bounded_per_step_and_their_cost_is_logged(tmp_path):
    import rolecall

    cfg = rolecall.make_config(None, {"algo.estimator": {"generator": "counterfactual", "*": "grpo"},
                                      "algo.estimator_options": {"counterfactual": {"replays": 3}},
                                      "train.steps": 1, "task.n_val": 2, "rollout.problems_per_step": 2,
                                      "rollout.group_size": 2, "train.val_every": 1})
    row = next(r for r in rolecall.train_run(cfg, tmp_path / "r").metrics if "cf/replays" in r)
    # 2 problems x 2 samples x 3 voters = 12 voter turns, none re-readable; 3 replayed, one aggregator call each
    assert row["cf/replay_candidates"] == 12 and row["cf/replays"] == 3 and row["cf/replay_calls"] == 3
    assert row["cf/replay_tokens"] > 0 and row["cf/replay_s"] > 0
    assert row["role/generator/cf_unavailable"] == pytest.approx(9 / 12)
    with pytest.raises(ConfigError, match="with estimator option replays > 0 it replays: \\['generator'\\]"):
        load_config(None, ["algo.estimator={generator: counterfactual}"])
