"""A grid's record (rolecall.grid.record): slow_steps (a step slowed by other work on the machine
stands out from its neighbours; a slow phase of the run itself, long early replies, does not),
role_shapes and validations."""
from __future__ import annotations

import pytest

from rolecall.grid.record import role_shapes, slow_steps, validations


def test_slow_steps_by_hand():
    rows = [{"step": s, "time/step_s": 28.0 if s <= 8 else 16.0} for s in range(1, 31)]
    rows[19]["time/step_s"] = 100.0                 # step 20: something else took a core
    rows.insert(24, {"step": 25, "time/step_s": 50.0})  # step 25 logged twice (a resume): the last row counts
    rows.append({"step": 12, "event": "alarm"})     # events are not steps
    rows.append({"step": 10, "val/accuracy": 0.5})  # nor validations
    out = slow_steps(rows)
    assert out == {"steps": [20], "excess_s": 84.0, "total_s": 8 * 28.0 + 22 * 16.0 + 84.0}
    assert slow_steps([]) == {"steps": [], "excess_s": 0.0, "total_s": 0.0}


def test_role_shapes_average_the_first_and_last_steps_of_each_role():
    rows = [{"step": s, "time/step_s": 1.0, "role/aggregator/len_p50": float(s), "role/generator/grad_share": 0.7,
             "role/aggregator/grad_share": None if s == 1 else 0.3, "policy/shared/grad_norm": 5.0}
            for s in range(1, 25)]
    rows.append({"step": 3, "event": "alarm", "role/aggregator/len_p50": 999.0})  # events are not steps
    rows.append({"step": 20, "val/accuracy": 0.5, "role/aggregator/len_p50": 999.0})  # nor validations
    out = role_shapes(rows, window=4)
    assert out["aggregator"] == {"len_p50": [2.5, 22.5], "grad_share": [0.3, 0.3]}  # step 1's None is skipped
    assert out["generator"] == {"len_p50": [None, None], "grad_share": [0.7, 0.7]}
    assert set(out) == {"aggregator", "generator"}  # policy/ keys are not roles
    assert role_shapes([]) == {}


def test_validations_keep_every_validation_step_with_its_metrics():
    rows = [{"step": 0, "val/accuracy": 0.5, "val/search_answer/abstain_rate": 0.9, "val/note": "text",
             "val/flag": True},
            {"step": 1, "time/step_s": 1.0, "search_answer/abstain_rate": 0.0},  # a training step
            {"step": 10, "val/accuracy": 0.6, "val/search_answer/abstain_rate": 0.2},
            {"step": 10, "event": "alarm", "val/accuracy": 0.0},                 # events are not validations
            {"step": 10, "val/accuracy": 0.7, "val/search_answer/abstain_rate": 0.1}]  # a resume: the last row
    assert validations(rows) == [{"step": 0, "accuracy": 0.5, "search_answer/abstain_rate": 0.9},  # numbers only
                                 {"step": 10, "accuracy": 0.7, "search_answer/abstain_rate": 0.1}]


def _planted_record() -> dict:
    """Two methods x two seeds (and a failed run, a control) with curves checked by hand."""
    def run(arm, seed, accs, status="done", kind="run"):
        curve = [{"problems": 8.0 * i, "generated_tokens": 0.0, "wall_seconds": 0.0, "accuracy": a}
                 for i, a in enumerate(accs)]
        return {"cell": f"{arm}-seed{seed}", "kind": kind, "status": status, "labels": {"arm": arm, "seed": f"seed{seed}"},
                "base": accs[0], "peak": max(accs), "final": accs[-1], "curve": curve}
    axes = [{"name": "arm", "role": "method", "labels": ["a", "b"]}, {"name": "seed", "role": "seed", "labels": []}]
    return {"axes": axes, "runs": [run("a", 0, [0.5, 0.9, 0.7, 0.8]), run("a", 1, [0.5, 0.6, 0.7]),
                                   run("b", 0, [0.5, 0.6, 0.6]), run("b", 1, [0.4, 0.5, 0.5]),
                                   run("b", 2, [0.4], status="failed"), run("x", 0, [0.1], kind="control")]}


def test_method_stats_and_a_paired_difference_by_hand():
    from rolecall.grid.record import method_difference, method_stats

    doc = _planted_record()
    stats = {tuple(s["method"]): s for s in method_stats(doc)}
    assert set(stats) == {("a",), ("b",)} and stats[("a",)]["seeds"] == ["seed0", "seed1"]
    assert stats[("a",)]["final"]["mean"] == pytest.approx(0.75)          # (0.8 + 0.7) / 2
    assert stats[("a",)]["largest_drop"]["values"] == pytest.approx([0.2, 0.0])  # 0.9 -> 0.7; never fell
    # two values: the t interval is mean +- 12.706 * sd / sqrt(2), sd of (0.8, 0.7) = 0.0707
    assert stats[("a",)]["final"]["ci95"] == pytest.approx([0.75 - 12.706 * 0.05, 0.75 + 12.706 * 0.05], abs=1e-3)
    diff = method_difference(doc, ("a",), ("b",))
    assert diff["seeds"] == ["seed0", "seed1"] and diff["values"] == pytest.approx([0.2, 0.2])
    assert diff["mean"] == pytest.approx(0.2) and diff["ci95"] == pytest.approx([0.2, 0.2])
    assert method_difference(doc, ("a",), ("zzz",))["n"] == 0
