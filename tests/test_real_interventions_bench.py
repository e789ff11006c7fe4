"""benchmarks/real_interventions.py: the cell's grid file, the pre-registered choice of cell and the
paired effects, by hand."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.real_interventions import ARMS, cell_grid, choose_cell, paired_effects, seed_stats  # noqa: E402


def test_the_cell_grid_keeps_the_real_grids_cell_and_adds_the_arms(tmp_path):
    path = ROOT / "configs" / "grids" / "real.yaml"
    grid = yaml.safe_load(path.read_text())
    spec = cell_grid(grid, path, "voting-isolated", [0, 1, 2])
    assert spec["overrides"]["routing"] == "isolated" and spec["overrides"]["workflow.name"] == "voting"
    assert spec["overrides"]["train.steps"] == grid["overrides"]["train.steps"]  # the same budget
    assert spec["axes"] == {"intervention": ARMS, "seed": [0, 1, 2]} and spec["control"] is False
    with pytest.raises(SystemExit, match="not a cell"):
        cell_grid(grid, path, "debate-isolated", [0])
    # the file it writes is a grid rolecall reads: 2 arms x 3 seeds, nothing else
    from rolecall.grid.spec import load_grid
    f = tmp_path / "g.yaml"
    f.write_text(yaml.safe_dump(spec))
    cells = load_grid(f).cells()
    assert sorted(c.name for c in cells) == sorted(f"{a}-seed{s}" for a in ARMS for s in (0, 1, 2))


def test_paired_effects_by_hand():
    none = {0: {"peak": 0.6, "final": 0.5, "fall": 0.2}, 1: {"peak": 0.7, "final": 0.7, "fall": 0.0},
            2: {"peak": 0.5, "final": 0.3, "fall": 0.25}}
    arm = {0: {"peak": 0.7, "final": 0.7, "fall": 0.0}, 1: {"peak": 0.7, "final": 0.6, "fall": 0.1}}
    out = paired_effects({"kl_anchor": arm}, none)["kl_anchor"]
    assert out["seeds"] == [0, 1]  # seed 2's arm has not run
    assert out["peak"]["values"] == [0.1, 0.0] and out["final"]["values"] == [0.2, -0.1]
    assert out["fall"]["mean"] == pytest.approx(-0.05)
    lo, hi = out["fall"]["ci95"]
    assert lo < -0.05 < hi
    assert paired_effects({"kl_anchor": {0: arm[0]}}, none)["kl_anchor"]["peak"]["ci95"] is None  # one seed


def _run(workflow, routing, seed, base, peak, final, rules=None):
    return {"kind": "run", "status": "done", "labels": {"workflow": workflow, "routing": routing, "seed": f"seed{seed}"},
            "base": base, "peak": peak, "final": final, "cliff_margin": 0.1, "rules_at_last_validation": rules or {}}


def test_the_rule_picks_the_cell_that_ended_below_its_peak_then_a_role_below_its_rule_then_the_least_gain():
    voting = {"voting/selection_acc": 0.9, "voting/rule_first_acc": 0.9, "voting/rule_majority_acc": 0.95}
    judge = {"eval_opt/evaluator_accuracy": 0.6, "eval_opt/rule_always_correct_acc": 0.6}
    runs = [_run("voting", "isolated", s, 0.3, 0.7, 0.65, voting) for s in range(3)]
    runs += [_run("eval_opt", "shared", s, 0.3, 0.5, 0.5, judge) for s in range(3)]
    runs += [{"kind": "control", "status": "done", "labels": {"seed": "seed0"}, "base": 0.2, "peak": 0.9, "final": 0.1}]
    # rule 2: no cell ended 0.10 below its peak (0.05 is not); the aggregator is 0.05 under the majority
    cell, why = choose_cell({"runs": runs})
    assert cell == "voting-isolated" and why.startswith("rule 2")
    # rule 1: one eval_opt seed ended 0.12 below its peak (a fall it recovered from would not count)
    runs[3] = _run("eval_opt", "shared", 0, 0.3, 0.62, 0.50, judge)
    assert choose_cell({"runs": runs})[0] == "eval_opt-shared"
    # ties in seeds go to the larger mean fall
    runs[0] = _run("voting", "isolated", 0, 0.3, 0.7, 0.55, voting)
    assert choose_cell({"runs": runs})[0] == "voting-isolated"
    # rule 3: no fall, every role at or above its best rule: the lowest mean peak gain
    even = {"voting/selection_acc": 0.95, "voting/rule_first_acc": 0.9, "voting/rule_majority_acc": 0.95}
    runs = [_run("voting", "isolated", s, 0.3, 0.7, 0.7, even) for s in range(3)]
    runs += [_run("eval_opt", "shared", s, 0.3, 0.5, 0.5, judge) for s in range(3)]
    cell, why = choose_cell({"runs": runs})
    assert cell == "eval_opt-shared" and why.startswith("rule 3")
    with pytest.raises(SystemExit, match="no finished method cell"):
        choose_cell({"runs": runs[:0]})


def test_seed_stats_reads_each_finished_run_and_its_roles_gap():
    voting = {"voting/selection_acc": 0.90, "voting/rule_first_acc": 0.90, "voting/rule_majority_acc": 0.96}
    records = [{**_run("voting", "isolated", 0, 0.3, 0.7, 0.6, voting), "fall": 0.1},
               {**_run("voting", "isolated", 1, 0.3, 0.5, 0.5), "fall": None},
               {**_run("voting", "isolated", 2, 0.3, 0.5, 0.5), "status": "started"}]
    stats = seed_stats(records)
    assert set(stats) == {"seed0", "seed1"}  # a run still going is not read
    assert stats["seed0"]["role_gap"] == pytest.approx(-0.06) and stats["seed0"]["fall"] == 0.1
    assert stats["seed1"]["role_gap"] is None and stats["seed1"]["peak"] == 0.5
    # and paired against the arm's, a missing statistic drops out rather than failing
    eff = paired_effects({"kl_anchor": {"seed0": {**stats["seed0"], "role_gap": -0.01}, "seed1": stats["seed1"]}},
                         stats)["kl_anchor"]
    assert eff["role_gap"]["values"] == [pytest.approx(0.05)] and eff["peak"]["values"] == [0.0, 0.0]
