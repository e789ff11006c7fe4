"""Plain-text picks and verdicts count only when the reply names one decision unambiguously,
each reply's kind is reported, and the selecting and judging roles are set beside trivial
rules. The misleading replies are the kinds SmolLM2-135M-Instruct wrote as voting's
aggregator under `role_format: plain`, where a first-integer reader counted them as picks."""
from __future__ import annotations

import pytest

from rolecall.algo.credit import credit
from rolecall.parsing import PICK_FORMS, VERDICT_FORMS, plain_pick_form, read_pick, read_verdict
from rolecall.types import Episode
from rolecall.workflows import build_workflow, load_prompts
from workflow_helpers import PROBLEM, by_role, run, score_strict

ECHO = 'The answer to the question "Which of the 3 answers is right?" is -3.'
ANSWERS = ["3", "42", "5"]  # the candidates' final answers: 3 is candidate 1's value and a candidate number

# --------------------------------------------------------------------------- misleading picks


@pytest.mark.parametrize("text,answers,kind", [
    (ECHO, None, "echo"),                          # the count quoted from the question; -3 is no integer pick
    (ECHO, ANSWERS, "echo"),
    ("Which of the 3 is right? Hard to say.", None, "echo"),
    ("All 3 candidates look fine.", None, "echo"),
    ("Your answer is 3", ANSWERS, "value"),        # 3 is candidate 1's answer: a value, not candidate 3
    ("3", ANSWERS, "value"),                       # a lone 3 cannot say which it means either
    ("The sum is 3.0, so 3", ["3.0", "7", "8"], "value"),
    ("1 and 2", None, "several"),
    ("either 1 or 3", None, "several"),
    ("either 1 or 3", ANSWERS, "several"),  # 3 is candidate 1's answer, but no mark says it is quoted
    ("Candidate 2, or 3", ANSWERS, "several"),  # 3 is not candidate 2's answer (42): maybe candidate 3
    ("Candidate 1 or candidate 2", ANSWERS, "several"),
    ("The final answer is 1, not 2.", None, "several"),  # no parse of negation: two candidates named
    ("no idea", ANSWERS, "none"),
    ("4", None, "none"),                           # out of range names no candidate
])
def test_a_misleading_reply_is_no_pick_and_says_why(text, answers, kind):
    assert read_pick(text, 3, "plain", answers=answers) == (None, kind)
    assert kind in PICK_FORMS


@pytest.mark.parametrize("text,pick", [
    ("candidate 3", 3),       # marked: a candidate even though 3 is also candidate 1's answer
    ("Candidate #3 is right", 3),
    ("option 2", 2),
    ("I choose choice 2.", 2),
    ("#3", 3),
    ("(3)", 3),
    ("[3] it is", 3),
    ("3: 3", 3),              # the `k: text` listing the aggregator is shown
    ("**3:** its sum is right", 3),
    ("answer 2", 2),          # unmarked, but 2 is no candidate's answer
    ("2", 2),                 # a lone number that is no candidate's answer
    ("**2.**", 2),
    ("2: 42", 2),             # 42 is a value, out of range anyway
    ("Candidate 1 says 5, and that is right", 1),  # 5 is out of range: no mention
    ("Candidate 1: its sum is 3", 1),  # 3 is candidate 1's answer, quoted after its mark
    ("<think>1 or 2?</think> candidate 2", 2),     # reasoning is not the reply
])
def test_a_real_pick_is_read_in_several_wordings(text, pick):
    assert read_pick(text, 3, "plain", answers=ANSWERS) == (pick, "plain")


def test_without_the_answers_a_stated_value_cannot_be_told_from_a_pick():
    """The old signature still works; it is the answers that let the reader refuse a value."""
    assert read_pick("Your answer is 3", 3, "plain") == (3, "plain")
    assert plain_pick_form("Your answer is 3", 3, ANSWERS) == (None, "value")


@pytest.mark.parametrize("role_format", ["boxed", "plain"])
def test_the_boxed_form_is_unchanged(role_format):
    assert read_pick("\\boxed{3}", 3, role_format, answers=ANSWERS) == (3, "boxed")
    assert read_pick(ECHO + " \\boxed{2}", 3, role_format, answers=ANSWERS) == (2, "boxed")


def test_boxed_reports_only_boxed_or_none():
    assert read_pick(ECHO, 3, "boxed", answers=ANSWERS) == (None, "none")
    assert read_pick("1 and 2", 3) == (None, "none")

# --------------------------------------------------------------------------- verdicts


@pytest.mark.parametrize("text,expected", [
    ("Correct. Wait, no: it is incorrect.", (None, "several")),  # both signs: not the first word
    ("Correct or Incorrect", (None, "several")),                # the prompt's own choice echoed
    ("It is right, but the answer is wrong", (None, "several")),
    ("It is not correct", (False, "plain")),                    # a negation flips the word, no contradiction
    ("The answer is incorrect, not correct", (False, "plain")),
    ("It is correct; the correct answer is 42.", (True, "plain")),  # "the correct answer is" is commentary
    ("Wrong. The right answer is 42.", (False, "plain")),
    ("Hmm.", (None, "none")),
    ("\\boxed{Correct} though it looks wrong", (True, "boxed")),   # a verdict box wins, as before
])
def test_plain_verdict_kinds(text, expected):
    assert read_verdict(text, "plain") == expected
    assert expected[1] in VERDICT_FORMS

# --------------------------------------------------------------------------- voting metrics


def _episode(right: list[bool], selected: int, answers: list[str | None], form: str) -> Episode:
    return Episode(problem=PROBLEM, sample=0, graded_rewards={"candidates": [float(r) for r in right]},
                   info={"selected": selected, "candidate_answers": answers, "aggregator_form": form,
                         "aggregator_fallback": form not in ("boxed", "plain")})


def test_voting_metrics_set_the_pick_beside_the_trivial_rules():
    eps = [
        _episode([False, True, True], 2, ["1", "5", "5"], "plain"),    # pick right, first wrong, majority (2) right
        _episode([True, False, False], 3, ["4", "7", "7"], "plain"),   # pick wrong, first right, majority (2) wrong
        _episode([False, False, True], 3, ["1", "2", None], "boxed"),  # pick right; a 1-1 tie goes to candidate 1: wrong
        _episode([False, False, False], 1, ["1", "1", "1"], "echo"),   # no right candidate: no selection to judge
    ]
    m = build_workflow("voting", load_prompts("math"), {"role_format": "plain"}).metrics(eps)
    assert m["voting/pass_at_k"] == pytest.approx(3 / 4)
    assert m["voting/selection_acc"] == pytest.approx(2 / 3)
    assert m["voting/rule_first_acc"] == pytest.approx(1 / 3)
    assert m["voting/rule_majority_acc"] == pytest.approx(1 / 3)
    assert m["voting/aggregator_parsed"] == pytest.approx(3 / 4)
    assert m["voting/aggregator_form/plain"] == pytest.approx(1 / 2)
    assert m["voting/aggregator_form/echo"] == pytest.approx(1 / 4)
    assert m["voting/aggregator_form/several"] == 0.0


def test_voting_plain_passes_the_candidates_answers_and_records_each_kind():
    candidates = ["The sum is 3", "x \\boxed{42}", "y \\boxed{5}"]  # an unboxed candidate: its last number
    replies = [ECHO, "Your answer is 3", "1 and 2", "candidate 3"]
    eps, _ = run("voting", by_role(generator=candidates * 4, aggregator=replies),
                 options={"role_format": "plain"}, group_size=4)
    assert [ep.info["candidate_answers"] for ep in eps] == [["3", "42", "5"]] * 4
    assert [ep.info["aggregator_form"] for ep in eps] == ["echo", "value", "several", "plain"]
    assert [ep.info["selected"] for ep in eps] == [1, 1, 1, 3]  # the `first` fallback for the three non-picks
    score_strict(eps)
    m = build_workflow("voting", load_prompts("math"), {"role_format": "plain"}).metrics(eps)
    assert m["voting/aggregator_parsed"] == pytest.approx(1 / 4)
    assert m["voting/aggregator_fallback"] == pytest.approx(3 / 4)
    assert m["voting/selection_acc"] == pytest.approx(0.0)  # 42 is right; nobody picked candidate 2
    assert m["voting/rule_first_acc"] == m["voting/rule_majority_acc"] == 0.0


def test_voting_rules_are_logged_under_the_default_format_too():
    eps, _ = run("voting", by_role(generator=["\\boxed{7}", "x \\boxed{42}", "y \\boxed{42}"], aggregator="\\boxed{1}"))
    score_strict(eps)
    m = build_workflow("voting", load_prompts("math"), {}).metrics(eps)
    assert m["voting/selection_acc"] == m["voting/rule_first_acc"] == 0.0
    assert m["voting/rule_majority_acc"] == 1.0
    assert "voting/aggregator_form/boxed" not in m

# --------------------------------------------------------------------------- judging roles


def test_eval_opt_logs_verdict_kinds_and_the_always_correct_rule():
    options = {"role_format": "plain"}
    eps, _ = run("eval_opt", by_role(generator=["\\boxed{1}", "\\boxed{2}", "\\boxed{42}"],
                                     evaluator=["Incorrect.", "Correct, no wait: wrong", "Correct."]), options=options)
    (ep,) = eps
    assert ep.info["verdicts"] == [False, None, True]  # the contradictory review is no verdict: a revision
    assert ep.info["evaluator_forms"] == ["plain", "several", "plain"]
    score_strict(eps)
    m = credit(eps, build_workflow("eval_opt", load_prompts("math"), options))
    assert ep.graded_rewards["judged"] == [0.0, 0.0, 1.0]
    assert m["eval_opt/evaluator_accuracy"] == pytest.approx(2 / 3)
    assert m["eval_opt/rule_always_correct_acc"] == pytest.approx(1 / 3)  # only the last solution was right
    assert m["eval_opt/evaluator_parsed"] == pytest.approx(2 / 3)  # "several" is not parsed
    assert m["eval_opt/evaluator_form/several"] == pytest.approx(1 / 3)
    assert m["eval_opt/evaluator_form/none"] == 0.0


def test_chain_counts_a_contradictory_verdict_as_unparsed():
    options = {"role_format": "plain"}
    eps, _ = run("chain", by_role(generator="\\boxed{41}", verifier="Correct or incorrect? Hard to say.",
                                  refiner="\\boxed{42}"), options=options)
    (ep,) = eps
    assert ep.info["verdict"] is None and ep.info["verifier_form"] == "several"
    score_strict(eps)
    assert build_workflow("chain", load_prompts("math"), options).metrics(eps)["chain/verifier_parsed"] == 0.0
