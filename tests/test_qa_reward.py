"""QA reward: SQuAD-style normalisation, exact match and token F1 against several golds."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from rolecall.cli import app
from rolecall.rewards.qa import extract_answer, f1, grade_qa, normalize_answer


def test_normalize_drops_case_punctuation_articles_and_spacing():
    assert normalize_answer("  The  Eiffel-Tower! ") == "eiffeltower"
    assert normalize_answer("An apple, a pear") == "apple pear"


def test_f1_by_hand():
    # pred tokens {paris, france}, gold {paris}: precision 1/2, recall 1 -> F1 2/3.
    assert f1("Paris, France", "Paris") == pytest.approx(2 / 3)
    assert f1("the", "a") == 1.0  # both normalise to nothing
    assert f1("London", "Paris") == 0.0


def test_grade_em_and_f1_take_the_best_gold():
    s = grade_qa("so \\boxed{The Eiffel Tower}", ["Tour Eiffel", "eiffel tower"])
    assert (s.value, s.status, s.extracted) == (1.0, "ok", "The Eiffel Tower")
    s = grade_qa("Answer: Paris, France", ["London", "Paris"], metric="f1")
    assert s.status == "wrong" and s.value == pytest.approx(2 / 3) and s.info["em"] == 0.0


def test_missing_answer_and_bad_gold():
    assert grade_qa("I do not know", ["x"]).status == "no_answer"
    assert grade_qa("I do not know", ["x"], missing_answer_penalty=0.5).value == -0.5
    s = grade_qa("\\boxed{x}", ["", "  "])
    assert s.value is None and s.status == "unscorable"
    with pytest.raises(ValueError, match="metric"):
        grade_qa("\\boxed{x}", ["x"], metric="bleu")


def test_citation_markers_are_not_part_of_the_answer():
    # search_answer numbers its evidence `[1] ...`; a reply citing it names the passage's answer.
    s = grade_qa("The answer is: [2] Tuthpen.", ["Tuthpen"], answer_from="boxed_or_last_line")
    assert (s.value, s.status, s.extracted) == (1.0, "ok", "Tuthpen.")
    assert grade_qa("\\boxed{Tuthpen [3]}", ["Tuthpen"]).status == "ok"
    assert grade_qa("Answer: [1]", ["Tuthpen"]).status == "no_answer"  # a citation alone names nothing
    assert grade_qa("Answer: 2 Tuthpen", ["Tuthpen"]).status == "wrong"  # a bare number is kept
    assert grade_qa("Answer: [1999]", ["1999"]).status == "ok"  # a year in brackets is not a citation


def test_extract_prefers_the_box_then_the_last_answer_line():
    assert extract_answer("Answer: a\nAnswer: b") == "b"
    assert extract_answer("Answer: a\n\\boxed{c}") == "c"
    assert extract_answer("<think>Answer: a</think> nothing") is None


def test_verify_qa_cli_prints_one_json_object():
    res = CliRunner().invoke(app, ["verify", "qa", "--gold", "Paris", "--gold", "paris city",
                                   "--completion", "-", "--metric", "f1"], input="Answer: Paris")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["score"] == 1.0 and out["status"] == "ok" and out["gold"] == ["Paris", "paris city"]


@pytest.mark.parametrize("reply, extracted, source, em", [
    ("Leba", "Leba", "last_line", 1.0),
    ("Let me look.\nThe answer is: Leba.", "Leba.", "last_line", 1.0),
    ("Leba is a land by the sea.", "Leba is a land by the sea.", "last_line", 0.0),  # a sentence is not the name
    ("so \\boxed{Leba}", "Leba", "boxed", 1.0),
    ("\\boxed{Leba", None, "none", 0.0),  # an unclosed box is no answer, not a line to fall back on
])
def test_answer_from_last_line_grades_a_plain_reply(reply, extracted, source, em):
    s = grade_qa(reply, ["Leba"], answer_from="boxed_or_last_line")
    assert (s.extracted, s.info.get("extracted_from"), s.info.get("em", 0.0)) == (extracted, source, em)
    if extracted is None:
        assert s.status == "no_answer"


def test_answer_from_boxed_keeps_the_answer_marker_fallback():
    # the default reads a box, else an `Answer:` line; a bare last line is no answer
    assert grade_qa("Leba", ["Leba"]).status == "no_answer"
    assert grade_qa("Answer: Leba", ["Leba"]).value == 1.0


def test_the_qa_reward_reads_answer_from_in_a_config(tmp_path):
    from rolecall.config import load_config
    from rolecall.rewards.verifier import build_verifier
    from rolecall.types import Problem

    cfg = load_config(None, ["task.name=multihop", "reward.name=qa", "reward.answer_from=boxed_or_last_line"])
    v = build_verifier(cfg.reward)
    (s,) = v.score_many(["The answer is Leba"], [Problem("u", "q", "Leba", {"kind": "qa"})])
    assert s.value == 1.0 and s.info["extracted_from"] == "last_line"


def test_verify_qa_cli_reads_answer_from():
    res = CliRunner().invoke(app, ["verify", "qa", "--gold", "Leba", "--completion", "-",
                                   "--answer-from", "boxed_or_last_line"], input="The answer is Leba")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["score"] == 1.0
    res = CliRunner().invoke(app, ["verify", "qa", "--gold", "Leba", "--completion", "-", "--answer-from", "last"],
                             input="Leba")
    assert res.exit_code != 0 and "--answer-from" in res.output
