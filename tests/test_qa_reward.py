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
