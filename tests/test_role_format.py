"""`workflow.options.role_format`: reading a role's pick or verdict from plain text when it
holds no usable box (`plain`), and only from boxes by default (`boxed`, the papers' forms).
The plain examples are replies SmolLM2-135M-Instruct wrote as voting's aggregator."""
from __future__ import annotations

import pytest

from rolecall.algo.credit import credit
from rolecall.parsing import plain_pick, plain_verdict, read_pick, read_verdict
from rolecall.workflows import build_workflow, load_prompts
from workflow_helpers import by_role, run, score_strict

# Measured aggregator replies (best of 3 candidates) and the candidate each one names.
SMOLLM_PICKS = [
    ("2: 4", 2),  # candidate 2, whose answer is 4
    ("1: 6\n\nThe answer is 1: 6.", 1),
]
# A measured reply that was once read as candidate 1 (its first integer in range). It names 1,
# 2 and 3; reading "1, not 2" as a pick of 1 needs a parse of negation this reader does not
# make, and a first-integer rule also turned "1 and 2" into a pick of 1, so it is "several".
SMOLLM_SEVERAL = "The final answer is 1, not 2, which is just 3 and 4, not 3."

# --------------------------------------------------------------------------- picks


@pytest.mark.parametrize("text,pick", SMOLLM_PICKS)
def test_plain_pick_reads_the_measured_replies(text, pick):
    assert read_pick(text, 3, "plain") == (pick, "plain")


def test_a_measured_reply_naming_several_candidates_is_no_pick():
    assert read_pick(SMOLLM_SEVERAL, 3, "plain") == (None, "several")


@pytest.mark.parametrize("text", [t for t, _ in SMOLLM_PICKS] + [SMOLLM_SEVERAL])
def test_boxed_default_ignores_plain_picks(text):
    assert read_pick(text, 3) == read_pick(text, 3, "boxed") == (None, "none")


@pytest.mark.parametrize("text,expected", [
    ("2: 4 so \\boxed{3}", (3, "boxed")),          # a usable box wins over an earlier plain number
    ("\\boxed{1} though 2 looks fine", (1, "boxed")),
    ("\\boxed{7} I mean 2", (2, "plain")),          # an out-of-range box is no usable box
    ("\\boxed{two}, so 3", (3, "plain")),
])
def test_a_usable_box_wins_over_plain_text(text, expected):
    assert read_pick(text, 3, "plain") == expected


@pytest.mark.parametrize("text,n,pick", [
    ("Candidate 3 is right", 3, 3),
    ("4", 3, None),                    # out of range: no pick
    ("12", 3, None),                   # not candidate 1 or 2: digits inside a bigger number
    ("12", 2, None),
    ("12 apples, so 2", 3, 2),         # out-of-range integers are skipped
    ("1.5 then 3", 3, 3),              # a decimal is not a pick
    ("-1 or 2", 3, 2),                 # nor a negative number
    ("1/2 of them: 3", 3, 3),          # nor a fraction
    ("1,000 ways; (2)", 3, 2),         # nor a thousands group; (2) is
    ("x2 2nd 3", 3, 3),                # nor digits in a word
    ("**2.** it is", 3, 2),            # list and bold markup around a pick are fine
    ("<think>1</think> pick 3", 3, 3),  # reasoning is not the reply
    ("no number here", 3, None),
    ("9" * 5000 + " 2", 3, 2),         # a huge number is skipped, not converted
])
def test_plain_pick_is_the_one_standalone_integer_in_range(text, n, pick):
    assert plain_pick(text, n) == pick


# --------------------------------------------------------------------------- verdicts


@pytest.mark.parametrize("text,verdict", [
    ("Incorrect.", False),
    ("It is not correct", False),          # a negation right before the word flips it
    ("This isn't right: 2+2 is 4", False),
    ("Not wrong, just slow.", True),
    ("Candidate 3 is right", True),
    ("Correct!", True),
    ("The solution is wrong; the correct answer is 5.", False),  # "the correct answer is" is commentary
    ("CORRECT", True),
    ("It was done correctly", None),      # whole words only
    ("incorrectness", None),
    ("no verdict here", None),
    ("<think>wrong?</think> Correct", True),
])
def test_plain_verdict_words(text, verdict):
    assert plain_verdict(text) is verdict


def test_incorrect_is_never_read_as_correct():
    assert read_verdict("incorrect", "plain") == (False, "plain")
    assert read_verdict("The answer is incorrect, not correct", "plain") == (False, "plain")


@pytest.mark.parametrize("text,expected", [
    ("\\boxed{Incorrect} though it looks correct", (False, "boxed")),
    ("Correct, I thought, but \\boxed{Incorrect}", (False, "boxed")),  # a verdict box wins wherever it is
    ("\\boxed{42} is correct", (True, "plain")),  # an answer box is no verdict box
    ("???", (None, "none")),
])
def test_a_verdict_box_wins_over_plain_words(text, expected):
    assert read_verdict(text, "plain") == expected


@pytest.mark.parametrize("text", ["Correct", "Incorrect.", "It is not correct", "\\boxed{42} is correct"])
def test_boxed_default_ignores_plain_verdicts(text):
    assert read_verdict(text) == read_verdict(text, "boxed") == (None, "none")


def test_readers_refuse_an_unknown_format():
    with pytest.raises(ValueError, match="role_format"):
        read_pick("\\boxed{1}", 3, "loose")
    with pytest.raises(ValueError, match="role_format"):
        read_verdict("\\boxed{Correct}", "loose")


# --------------------------------------------------------------------------- the option


@pytest.mark.parametrize("name", ["voting", "eval_opt", "chain", "debate"])
@pytest.mark.parametrize("bad", ["Plain", "box", None, 1, ["plain"]])
def test_an_unknown_role_format_names_the_option_and_the_allowed_values(name, bad):
    with pytest.raises(ValueError, match=r"workflow\.options\.role_format: must be 'boxed' or 'plain', got"):
        build_workflow(name, load_prompts("math"), {"role_format": bad})


def test_a_config_with_an_unknown_role_format_fails_at_load():
    from rolecall.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=r"workflow\.options\.role_format: must be 'boxed' or 'plain', got 'loose'"):
        load_config(None, ["workflow.options={role_format: loose}"])
    assert load_config(None, ["workflow.options={role_format: plain}"]).workflow.options == {"role_format": "plain"}


@pytest.mark.parametrize("name", ["voting", "eval_opt", "chain", "debate"])
def test_role_format_defaults_to_boxed(name):
    assert build_workflow(name, load_prompts("math"), {}).role_format == "boxed"


def test_orch_workers_has_no_role_format():
    """Its strategies are plain lines already; there is no boxed form to fall back from."""
    with pytest.raises(ValueError, match="unknown option"):
        build_workflow("orch_workers", load_prompts("math"), {"role_format": "plain"})


# --------------------------------------------------------------------------- whole workflows

CANDIDATES = ["\\boxed{3}", "x \\boxed{42}", "y \\boxed{5}"]


def test_voting_plain_uses_the_plain_pick_and_records_its_form():
    eps, _ = run("voting", by_role(generator=CANDIDATES * 3, aggregator=["2: 42", "\\boxed{3}", "no idea"]),
                 options={"role_format": "plain"}, group_size=3)
    assert [ep.info["aggregator_form"] for ep in eps] == ["plain", "boxed", "none"]
    assert [ep.info["selected"] for ep in eps] == [2, 3, 1]  # none: the `first` fallback
    assert [ep.info["aggregator_fallback"] for ep in eps] == [False, False, True]
    assert eps[0].final_answer == "x \\boxed{42}"
    score_strict(eps)
    m = build_workflow("voting", load_prompts("math"), {"role_format": "plain"}).metrics(eps)
    assert m["voting/aggregator_fallback"] == pytest.approx(1 / 3)  # 1 - the parsed share, either form
    assert m["voting/aggregator_plain"] == pytest.approx(1 / 3)
    assert m["voting/aggregator_parsed"] == pytest.approx(2 / 3)
    assert m["voting/aggregator_form/none"] == pytest.approx(1 / 3)
    assert m["voting/selection_acc"] == pytest.approx(1 / 3)


def test_voting_default_ignores_a_plain_pick_and_logs_no_form():
    eps, _ = run("voting", by_role(generator=CANDIDATES, aggregator="2: 42"))
    (ep,) = eps
    assert ep.info["aggregator_fallback"] is True and ep.info["selected"] == 1
    assert "aggregator_form" not in ep.info
    score_strict(eps)
    assert "voting/aggregator_plain" not in build_workflow("voting", load_prompts("math"), {}).metrics(eps)


def test_eval_opt_plain_uses_the_plain_verdict_and_records_its_form():
    options = {"role_format": "plain", "evaluator_reward": True}
    eps, _ = run("eval_opt", by_role(generator=["\\boxed{1}", "\\boxed{42}"],
                                     evaluator=["Incorrect. Carry the ten.", "It is correct."]), options=options)
    (ep,) = eps
    assert [t.role for t in ep.turns] == ["generator", "evaluator"] * 2  # a plain Correct stops it
    assert ep.info["verdicts"] == [False, True]
    assert ep.info["evaluator_forms"] == ["plain", "plain"]
    assert ep.final_answer == "\\boxed{42}"
    score_strict(eps)
    m = credit(eps, build_workflow("eval_opt", load_prompts("math"), options))
    assert m["eval_opt/evaluator_parsed"] == m["eval_opt/evaluator_plain"] == 1.0
    assert m["eval_opt/evaluator_accuracy"] == 1.0
    assert m["eval_opt/iter1_verdict_incorrect"] == 1.0 and m["eval_opt/iter1_verdict_unparseable"] == 0.0
    evaluators = [t.index for t in ep.turns if t.role == "evaluator"]
    assert ep.turn_rewards == dict(zip(evaluators, [1.0, 1.0]))  # plain verdicts earn evaluator_reward


def test_eval_opt_plain_mixed_forms_per_call():
    eps, _ = run("eval_opt", by_role(generator=["\\boxed{1}", "\\boxed{2}", "\\boxed{42}"],
                                     evaluator=["hmm", "\\boxed{Incorrect} but right idea", "Right."]),
                 options={"role_format": "plain"})
    (ep,) = eps
    assert ep.info["verdicts"] == [None, False, True]
    assert ep.info["evaluator_forms"] == ["none", "boxed", "plain"]
    score_strict(eps)
    m = build_workflow("eval_opt", load_prompts("math"), {"role_format": "plain"}).metrics(eps)
    assert m["eval_opt/evaluator_parsed"] == pytest.approx(2 / 3)
    assert m["eval_opt/evaluator_plain"] == pytest.approx(1 / 3)


def test_eval_opt_default_reads_no_plain_verdict():
    eps, _ = run("eval_opt", by_role(generator=["\\boxed{1}", "\\boxed{42}"], evaluator=["Correct", "\\boxed{Correct}"]))
    (ep,) = eps
    assert ep.info["verdicts"] == [None, True] and "evaluator_forms" not in ep.info
    score_strict(eps)
    assert "eval_opt/evaluator_parsed" not in build_workflow("eval_opt", load_prompts("math"), {}).metrics(eps)


def test_chain_plain_reads_the_verifiers_plain_verdict():
    options = {"role_format": "plain", "credit": "per_role"}
    eps, _ = run("chain", by_role(generator="\\boxed{41}", verifier="It is not correct: 12+30 is 42.",
                                  refiner="\\boxed{42}"), options=options)
    (ep,) = eps
    assert ep.info["verdict"] is False and ep.info["verifier_form"] == "plain"
    score_strict(eps)
    m = credit(eps, build_workflow("chain", load_prompts("math"), options))
    assert m["chain/verdict_acc"] == 1.0
    assert m["chain/verifier_parsed"] == m["chain/verifier_plain"] == 1.0
    assert ep.turn_rewards[ep.info["verifier_turn"]] == 1.0


def test_debate_plain_reads_the_scorers_plain_verdicts():
    calls = []

    def script(req):
        calls.append((req.policy, req.messages[-1]["content"]))
        if req.policy == "scorer":
            return "Correct." if "42" in req.messages[-1]["content"] else "\\boxed{Incorrect}"
        return "\\boxed{42}" if len(calls) != 1 else "\\boxed{7}"

    options = {"n_agents": 2, "rounds": 2, "peer_scores": "scorer", "role_format": "plain"}
    eps, _ = run("debate", script, options=options, routes={"debater": "debater", "scorer": "scorer"})
    (ep,) = eps
    assert ep.info["scorer_forms"] == ["boxed", "plain"]  # agent0 said 7, agent1 said 42
    debater_prompts = [text for policy, text in calls if policy == "debater"]
    assert "2: \\boxed{42} (checked: correct)" in debater_prompts[2]  # agent0 sees agent1, scored in plain
    assert "2: \\boxed{7} (checked: incorrect)" in debater_prompts[3]
    score_strict(eps)
    m = build_workflow("debate", load_prompts("math"), options).metrics(eps)
    assert m["debate/scorer_parsed"] == 1.0 and m["debate/scorer_plain"] == 0.5


def test_voting_format_penalty_charges_only_an_aggregator_whose_pick_fell_back():
    """Per-role format credit: the fallback's pick is not the aggregator's, so it is not paid as one."""
    options = {"role_format": "plain", "format_penalty": 0.5}
    eps, _ = run("voting", by_role(generator=CANDIDATES * 3, aggregator=["2: 42", "no idea", "no idea"]),
                 options=options, group_size=3)
    score_strict(eps)
    wf = build_workflow("voting", load_prompts("math"), options)
    credit(eps, wf)
    picked, fell_back = eps[0], eps[1]
    assert picked.turn_rewards == {}  # parsed: every turn keeps the outcome
    agg = next(t.index for t in fell_back.turns if t.role == "aggregator")
    assert fell_back.turn_rewards == {agg: fell_back.reward - 0.5}
    assert fell_back.info["unformatted_turns"] == [agg]


@pytest.mark.parametrize("workflow", ["voting", "eval_opt", "chain", "orch_workers", "debate"])
def test_format_penalty_is_checked_and_off_by_default(workflow):
    for bad in (-1, True, float("nan"), "0.5"):
        with pytest.raises(ValueError, match="format_penalty must be a number >= 0"):
            build_workflow(workflow, load_prompts("math"), {"format_penalty": bad})
    assert build_workflow(workflow, load_prompts("math"), {}).format_penalty == 0.0


def test_voting_without_format_penalty_records_and_charges_nothing():
    eps, _ = run("voting", by_role(generator=CANDIDATES, aggregator="no idea"))
    score_strict(eps)
    credit(eps, build_workflow("voting", load_prompts("math"), {}))
    assert eps[0].turn_rewards == {} and "unformatted_turns" not in eps[0].info


@pytest.mark.parametrize("evaluator_reward", [False, True])
def test_eval_opt_format_penalty_charges_each_evaluator_turn_without_a_verdict(evaluator_reward):
    """Off the outcome (1.0 here) by default; off the evaluator's own reward with `evaluator_reward`
    (an unreadable verdict earns 0, so 0 - 0.5; the right second verdict earns 1)."""
    options = {"rounds": 2, "role_format": "plain", "format_penalty": 0.5, "evaluator_reward": evaluator_reward}
    eps, _ = run("eval_opt", by_role(generator=["\\boxed{41}", "\\boxed{42}"], evaluator=["hmm", "Correct."]),
                 options=options)
    (ep,) = eps
    score_strict(eps)
    credit(eps, build_workflow("eval_opt", load_prompts("math"), options))
    first, second = [t.index for t in ep.turns if t.role == "evaluator"]
    assert ep.info["verdicts"] == [None, True] and ep.reward == 1.0
    assert ep.turn_rewards == ({first: -0.5, second: 1.0} if evaluator_reward else {first: 0.5})


def test_chain_format_penalty_charges_a_verifier_without_a_verdict():
    options = {"role_format": "plain", "format_penalty": 0.25}
    eps, _ = run("chain", by_role(generator="\\boxed{41}", verifier="Let me see.", refiner="\\boxed{42}"),
                 options=options)
    (ep,) = eps
    score_strict(eps)
    credit(eps, build_workflow("chain", load_prompts("math"), options))
    assert ep.info["verdict"] is None
    assert ep.turn_rewards == {ep.info["verifier_turn"]: 0.75}


def test_orch_workers_format_penalty_charges_a_short_plan_and_logs_the_parsed_share():
    options = {"n_workers": 2, "format_penalty": 0.5}
    eps, _ = run("orch_workers", by_role(orchestrator=["1. add\n2. count", "just add"], worker="\\boxed{42}",
                                         synthesizer="\\boxed{42}"), options=options, group_size=2)
    score_strict(eps)
    m = credit(eps, build_workflow("orch_workers", load_prompts("math"), options))
    full, short = eps
    assert full.info["strategies_missing"] == 0 and full.turn_rewards == {}
    plan = next(t.index for t in short.turns if t.role == "orchestrator")
    assert short.info["strategies_missing"] == 1 and short.turn_rewards == {plan: 0.5}
    assert m["orch_workers/orchestrator_parsed"] == 0.5


def test_debate_format_penalty_charges_each_scorer_turn_without_a_verdict():
    options = {"n_agents": 2, "rounds": 2, "peer_scores": "scorer", "role_format": "plain", "format_penalty": 0.5}
    replies = iter(["Correct.", "no idea"])

    def script(req):
        return next(replies) if req.policy == "scorer" else "\\boxed{42}"

    eps, _ = run("debate", script, options=options, routes={"debater": "debater", "scorer": "scorer"})
    (ep,) = eps
    score_strict(eps)
    credit(eps, build_workflow("debate", load_prompts("math"), options))
    scorers = [t.index for t in ep.turns if t.role == "scorer"]
    assert ep.info["unformatted_turns"] == [scorers[1]]
    assert ep.turn_rewards[scorers[1]] == ep.reward - 0.5 and scorers[0] not in ep.turn_rewards
