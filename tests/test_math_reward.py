"""Strict math grading: boxed extraction, normalisation, exact numeric equality."""
from __future__ import annotations

import time

import pytest

from rolecall.rewards import Score, answers_match, grade_math


def test_correct_boxed_answer():
    assert grade_math("so the answer is \\boxed{42}.", "42") == Score(1.0, "ok")


def test_nested_braces_and_last_box_wins():
    text = "first \\boxed{1} then \\boxed{\\frac{1}{2}}"
    assert grade_math(text, "0.5") == Score(1.0, "ok")
    assert grade_math(text, "1").status == "wrong"


def test_think_block_is_ignored():
    text = "<think>maybe \\boxed{7}</think>The answer is \\boxed{8}"
    assert grade_math(text, "8").status == "ok"
    # A box only inside the reasoning does not count as an answer.
    assert grade_math("<think>\\boxed{7}</think>I think 7.", "7").status == "no_answer"


def test_wrong_answer():
    assert grade_math("\\boxed{41}", "42") == Score(0.0, "wrong")


def test_no_box_and_penalty():
    assert grade_math("the answer is 42", "42") == Score(0.0, "no_answer")
    assert grade_math("the answer is 42", "42", missing_box_penalty=0.5) == Score(-0.5, "no_answer")


def test_unclosed_last_box_falls_back_or_is_missing():
    # parsing.last_boxed treats an unclosed last box as missing and looks further back.
    assert grade_math("\\boxed{3} oh wait \\boxed{4", "3").status == "ok"
    assert grade_math("\\boxed{4", "4").status == "no_answer"


def test_empty_gold_is_unscorable():
    assert grade_math("\\boxed{4}", "  ") == Score(None, "unscorable")


@pytest.mark.parametrize(
    "pred, gold",
    [
        ("0.5", "1/2"),
        ("\\frac{1}{2}", "0.5"),
        ("\\dfrac{1}{2}", "1/2"),
        ("-\\frac{3}{4}", "-0.75"),
        ("\\frac{-3}{4}", "-3/4"),
        ("2.0", "2"),
        ("2.50", "5/2"),
        ("1,000", "1000"),
        ("1{,}000", "1000"),
        ("12,345.5", "12345.50"),
        ("$5$", "5"),
        ("\\text{5}", "5"),
        ("$\\text{ 5 }$.", "5"),
        ("7.", "7"),
        ("\\left(1,2\\right)", "(1, 2)"),
        ("\\text{Monday}", "Monday"),
        (" 3 ", "3"),
        (".5", "0.5"),
    ],
)
def test_equivalent_answers(pred, gold):
    assert answers_match(pred, gold)
    assert answers_match(gold, pred)


@pytest.mark.parametrize(
    "pred, gold",
    [
        ("2+2", "4"),  # no expression evaluation
        ("0.333", "1/3"),  # exact, no float tolerance
        ("1/0", "0"),  # division by zero is not a number
        ("\\frac{1}{0}", "0"),
        ("1,00", "100"),  # not a thousands pattern
        ("\\text{a}+\\text{b}", "a}+\\text{b"),  # \text wrapper must span the whole answer
        ("\\rightarrow", "arrow"),  # \right is only stripped as a delimiter command
        ("", "0"),
        ("-1", "1"),
    ],
)
def test_non_equivalent_answers(pred, gold):
    assert not answers_match(pred, gold)


def test_huge_numbers_are_not_parsed():
    big = "1" * 1500
    assert not answers_match(big + ".0", big)  # > 1000 digits: treated as non-numeric
    assert answers_match(big, big)  # plain string equality still works


def test_huge_inputs_return_quickly():
    start = time.perf_counter()
    # Degenerate repetition loop of unclosed boxes (quadratic for a naive scan).
    assert grade_math("\\boxed{" * 200_000, "1").status == "no_answer"
    assert grade_math("\\boxed{" * 200_000 + "\\boxed{1}", "1").status == "ok"
    # A box opened more than the scanned tail before the end is not looked for.
    assert grade_math("\\boxed{" + "9" * 1_000_000 + "}", "9").status == "no_answer"
    # Too many digits to read as exact numbers: strict equality only (math-verify is tested apart).
    assert grade_math("\\boxed{" + "9" * 1_500 + "}", "9" * 1_500 + ".0", checker="strict").status == "wrong"
    assert not answers_match("1" * 1_000_000, "1" * 999_999 + "2")
    assert not answers_match("{" * 100_000, "\\text{" + "{" * 100_000)
    assert time.perf_counter() - start < 0.5


# reward.answer_from: a documented fallback for completions without any box, never a silent guess.

@pytest.mark.parametrize("text,answer_from,expected", [
    ("so 5-3 = 2.", "boxed_or_last_number", ("2", "last_number")),
    ("x = -3", "boxed_or_last_number", ("-3", "last_number")),
    ("(1+2)-3", "boxed_or_last_number", ("3", "last_number")),     # a minus after `)` is an operator
    ("total 1,234 apples, ratio 3/4", "boxed_or_last_number", ("3/4", "last_number")),
    ("<think>\\boxed{7}</think>I think 7.", "boxed_or_last_number", ("7", "last_number")),
    ("work\n**Answer:** 42\n\n", "boxed_or_last_line", ("42", "last_line")),
    ("The final answer is Paris", "boxed_or_last_line", ("Paris", "last_line")),
    ("7 then \\boxed{8}", "boxed_or_last_number", ("8", "boxed")),          # a box always wins
    ("7 then \\boxed{8", "boxed_or_last_number", (None, "none")),           # a begun box: no fallback
    ("7 then \\boxed{}", "boxed_or_last_line", (None, "none")),             # an empty box too
    ("no digits", "boxed_or_last_number", (None, "none")),
    ("the answer is 42", "boxed", (None, "none")),
])
def test_final_answer_falls_back_only_without_a_box(text, answer_from, expected):
    from rolecall.parsing import final_answer

    found = final_answer(text, answer_from)
    assert (found.text, found.source) == expected


def test_math_grades_the_fallback_and_records_which_answer_it_graded():
    s = grade_math("the answer is 1,234", "1234", answer_from="boxed_or_last_number")
    assert (s.value, s.status, s.extracted, s.info) == (1.0, "ok", "1,234", {"extracted_from": "last_number"})
    s = grade_math("\\boxed{41} though 42", "42", answer_from="boxed_or_last_number")
    assert (s.status, s.info["extracted_from"]) == ("wrong", "boxed")
    s = grade_math("no idea", "42", missing_box_penalty=0.5, answer_from="boxed_or_last_line", checker="strict")
    assert (s.value, s.status, s.info["extracted_from"]) == (0.0, "wrong", "last_line")  # an answer: no penalty
    s = grade_math("the answer is 42", "42")  # the default: boxed only, and nothing recorded
    assert (s.status, s.info) == ("no_answer", {})
    with pytest.raises(ValueError, match="answer_from: unknown 'last'"):
        grade_math("42", "42", answer_from="last")


def test_answer_from_is_refused_where_the_verifier_would_ignore_it():
    from rolecall.config import ConfigError, load_config

    cfg = load_config(None, ["reward.answer_from=boxed_or_last_number"])
    assert cfg.reward.answer_from == "boxed_or_last_number"
    with pytest.raises(ConfigError, match="reward.answer_from: 'boxed_or_last_line' is read only by math, qa, reasoning_gym"):
        load_config(None, ["reward.name=mypkg.grading:score", "reward.answer_from=boxed_or_last_line"])
