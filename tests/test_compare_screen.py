"""`rolecall compare screen`: the rule, the readings off an untrained evaluation, and a tiny screen end to end."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from rolecall.cli import app
from rolecall.compare.plan import CompareError
from rolecall.compare.screen import choose, load_screen, summarize

pytest.importorskip("reasoning_gym")

RULE = {"accuracy": [0.15, 0.60], "min_distinct": 1000, "draws": 5000}


def _row(distinct, single, headroom):
    return {"space": {"distinct": distinct, "draws": 5000}, "single_sample": single, "headroom": headroom}


def test_the_rule_keeps_room_and_a_window_then_takes_the_largest_headroom():
    rows = {"small": _row(200, 0.3, 0.5), "easy": _row(5000, 0.9, 0.4), "hard": _row(5000, 0.05, 0.3),
            "a": _row(4000, 0.3, 0.2), "b": _row(3000, 0.5, 0.25), "c": _row(3000, 0.15, 0.25),
            "broken": {"excluded": "too few distinct questions"}}
    got = choose(RULE, rows)
    assert got["passing"] == ["a", "b", "c"] and got["chosen"] == "b"  # b and c tie: the earlier one
    assert "200 distinct questions" in got["excluded"]["small"] and "0.9 outside" in got["excluded"]["easy"]
    assert got["excluded"]["broken"] == "too few distinct questions"


def test_summarize_reads_single_sample_oracle_and_headroom_off_the_episodes():
    # voting, two problems x two answers: workflow right 2/4, first 1/4, majority 2/4, oracle 3/4
    doc = {"accuracy": 0.5, "metrics": {}, "problems": {
        "p1": {"correct": [1, 0], "oracle": [1, 1], "rules": {"aggregator": {"first": [1, 0], "majority": [1, 1]}}},
        "p2": {"correct": [1, 0], "oracle": [1, 0], "rules": {"aggregator": {"first": [0, 0], "majority": [0, 0]}}}}}
    s = summarize(doc)
    assert s["single_sample"] == 0.25 and s["oracle"] == 0.75
    assert s["headroom"] == pytest.approx(0.25) and s["role_minus_best_rule"] == pytest.approx(0.0)
    ev = summarize({"accuracy": 0.5, "metrics": {"eval_opt/evaluator_accuracy": 0.6,
                                                 "eval_opt/rule_always_correct_acc": 0.4},
                    "problems": {"p1": {"correct": [1, 0], "rules": {"evaluator": {"always accept": [1, 0]}}}}})
    assert ev["single_sample"] == 0.5 and ev["evaluator_accuracy"] == 0.6 and ev["auroc"] is None
    assert "headroom" not in ev


def test_a_screen_file_without_a_full_rule_or_with_a_typo_is_refused(tmp_path):
    bad = tmp_path / "s.yaml"
    bad.write_text("workflows: [examples/voting]\nrule: {accuracy: [0.6, 0.1], min_distinct: 1, draws: 5}\n"
                   "candidates: {a: {task.gym: chain_sum}}\n")
    with pytest.raises(CompareError, match="rule needs accuracy"):
        load_screen(bad)
    typo = tmp_path / "t.yaml"
    typo.write_text("workflows: [examples/voting]\noverrides: {task.name: reasoning_gym, reward.name: reasoning_gym}\n"
                    "rule: {accuracy: [0.1, 0.6], min_distinct: 1, draws: 5}\n"
                    "candidates: {a: {task.gym: chain_sum, task.gym_options: {min_digitz: 1}}}\n")
    res = CliRunner().invoke(app, ["compare", "screen", str(typo), "--out", str(tmp_path / "o")])
    assert res.exit_code != 0 and "screen candidate 'a'" in res.output and "min_digitz" in res.output
    assert not (tmp_path / "o" / "evals").exists()


def test_a_tiny_screen_records_the_rule_before_its_candidates_and_chooses(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("workflows: [examples/voting, examples/eval_opt]\n"
                 "overrides: {task.name: reasoning_gym, reward.name: reasoning_gym, reward.answer_from: "
                 "boxed_or_last_number, task.n_val: 3, task.gym_train_size: 40}\n"
                 "samples: 1\nrule: {accuracy: [0.0, 1.0], min_distinct: 101, draws: 2000}\n"
                 "candidates:\n"
                 "  two: {task.gym: chain_sum, task.gym_options: {min_terms: 2, max_terms: 2, max_digits: 2}}\n"
                 "  few: {task.gym: products, task.gym_options: {min_terms: 2, max_terms: 2, min_digits: 1, max_digits: 1}}\n")
    res = CliRunner().invoke(app, ["compare", "screen", str(f), "--out", str(tmp_path / "o"),
                                   "--record", str(tmp_path / "kept" / "screen.json")])
    assert res.exit_code == 0, res.output
    rec = json.loads((tmp_path / "o" / "screen.json").read_text())
    assert json.loads((tmp_path / "kept" / "screen.json").read_text()) == rec  # --record: the same record, copied
    assert rec["rule"]["min_distinct"] == 101 and rec["rule_written"] <= rec["finished"]
    assert rec["candidates"]["few"]["space"]["distinct"] == 100  # 10 x 10 products: excluded by min_distinct
    assert set(rec["candidates"]["two"]) >= {"voting", "eval_opt", "single_sample", "headroom"}
    assert rec["choice"]["chosen"] == "two" and "few" in rec["choice"]["excluded"]
