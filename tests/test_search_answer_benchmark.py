"""The search_answer benchmark judges a rise in validation F1 per problem, paired with step 0:
a rise from near 0 made by one lucky answer must not pass as learning."""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.search_answer import f1_by_problem, paired_gain  # noqa: E402


def _row(step: int, uid: str, f1: float | None, reward: float | None) -> str:
    info = {"verdict": {"f1": f1}} if f1 is not None else {}
    return json.dumps({"step": step, "uid": uid, "reward": reward, "info": info})


def test_f1_is_read_per_problem_and_step_as_the_metric_takes_it(tmp_path):
    f = tmp_path / "val_samples.jsonl"
    f.write_text("\n".join([_row(0, "a", 0.5, 0.0), _row(0, "b", None, 1.0), _row(0, "c", None, None),
                            _row(10, "a", 1.0, 1.0)]) + "\n")
    assert f1_by_problem(f, 0) == {"a": 0.5, "b": 1.0, "c": 0.0}
    assert f1_by_problem(f, 10) == {"a": 1.0}


def test_one_lucky_answer_is_a_rise_but_not_beyond_chance():
    before = {str(i): 0.0 for i in range(200)}
    one = paired_gain(before, {**before, "7": 1.0})
    assert one["gain"] == 0.005 and one["improved"] == 1 and one["ci95"][0] == 0.0


def test_a_rise_on_many_problems_is_beyond_chance_and_a_fall_is_not():
    before = {str(i): 0.0 for i in range(200)}
    rose = paired_gain(before, {u: (1.0 if int(u) % 10 == 0 else 0.0) for u in before})
    assert rose["gain"] == 0.1 and rose["ci95"][0] > 0.05 and rose["improved"] == 20
    fell = paired_gain({u: 1.0 for u in before}, {u: (0.0 if int(u) % 10 == 0 else 1.0) for u in before})
    assert fell["ci95"][1] < 0 and fell["worsened"] == 20


def test_only_problems_scored_at_both_steps_are_paired():
    assert paired_gain({"a": 0.0, "b": 0.0}, {"b": 1.0, "c": 1.0})["problems"] == 1
    assert paired_gain({"a": 0.0}, {"c": 1.0}) == {"problems": 0}
