"""The README's tables are rendered from benchmarks/results/ (benchmarks/tables.py), never copied."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.tables import BLOCK, DOCUMENTS, TABLES, render  # noqa: E402


@pytest.mark.parametrize("doc", DOCUMENTS, ids=lambda d: str(d.relative_to(ROOT)))
def test_every_generated_table_matches_its_results(doc):
    text = doc.read_text()
    names = [m.group("name") for m in BLOCK.finditer(text)]
    assert {n for n in names if not n.startswith("rolecall grid table ")} <= set(TABLES)
    assert names or doc != ROOT / "README.md"
    _, changed = render(text)
    assert changed == [], f"stale tables {changed} in {doc.name}: run python -m benchmarks.tables"


def test_a_block_named_by_the_product_command_is_what_the_command_prints():
    """A doc's table of a recorded grid is `rolecall grid table ...`'s own output, rendered in process."""
    import subprocess

    text = (ROOT / "README.md").read_text()
    m = next(m for m in BLOCK.finditer(text) if m.group("name").startswith("rolecall grid table "))
    words = m.group("name").split()
    printed = subprocess.run([sys.executable, "-m", "rolecall", *words[1:]], cwd=ROOT, capture_output=True,
                             text=True, timeout=120)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == m.group("body")


def test_a_hand_edited_number_is_caught():
    text = (ROOT / "README.md").read_text()
    m = next(BLOCK.finditer(text))
    edited = text[:m.start("body")] + m.group("body").replace("0.", "9.", 1) + text[m.end("body"):]
    assert render(edited)[1] == [m.group("name")]


def _speed_doc(old: bool) -> dict:
    """A `python -m benchmarks.run` result: as the 2026-11-23 script wrote it (SP/IP in the ratio
    field, no TRL setting, no provenance) or as it writes now."""
    def arm(rates):
        return [{"completions_per_s": r, "version": "1.4.3"} for r in rates]

    trl = {"trl_version": "1.16.0", "prompts_per_step": 8, "group_size": 8, "max_new_tokens": 32,
           "trl": arm([10, 12]), "rolecall": arm([30, 33]), "ratio_per_round": [3.0, 2.75]}
    details = {"trl": trl if old else {**trl, "gradient_checkpointing": True,
                                       "gradient_checkpointing_source": "TRL default"},
               "comlrl": {"agents": 2, "group_size": 8, "max_new_tokens": 32, "comlrl": arm([5, 6]),
                          "rolecall": arm([11, 12]), "ratio_per_round": [2.2, 2.0]},
               "ip_sp_cost": {"steps": 6, "ip_s_per_ktoken": 0.52, "sp_s_per_ktoken": 0.5},
               "mixed_adapter": {"batch": 48, "mixed_tokens_per_s": 900.0, "single_adapter_tokens_per_s": 1000.0},
               "forward_bound": {"batch": 16, "new_tokens": 32, "generate_tokens_per_s": 870.0,
                                 "forward_bound_tokens_per_s": 1000.0}}
    doc = {"date": "2026-11-23", "machine": "x86_64, 2 threads", "trl_throughput_ratio": 2.9,
           "comlrl_throughput_ratio": 2.1, "ip_sp_cost_ratio": 0.5 / 0.52 if old else 0.52 / 0.5,
           "mixed_adapter_ratio": 0.9, "generation_fraction_of_forward_bound": 0.87, "details": details,
           "goals": {"trl_throughput_ratio": ">= 1.5", "comlrl_throughput_ratio": ">= 2.0", "ip_sp_cost_ratio": "<= 1.05",
                     "mixed_adapter_ratio": ">= 0.9", "generation_fraction_of_forward_bound": ">= 0.5"}}
    if not old:
        details["trl_no_checkpointing"] = {**trl, "gradient_checkpointing": False, "gradient_checkpointing_source": "set",
                                           "ratio_per_round": [2.5, 2.4]}
        doc.update(trl_no_checkpointing_throughput_ratio=2.45, date="2026-11-28", commit="abcdef1234", dirty=False,
                   missed={"mixed_adapter_ratio": "0.874 vs goal >= 0.9 (short by 0.026)"})
    return doc


@pytest.mark.parametrize("old", [True, False])
def test_speed_table_states_which_ratio_it_shows_and_how_trl_ran(tmp_path, monkeypatch, old):
    import json

    from benchmarks import tables

    (tmp_path / "2026-11-20.json").write_text("{}")  # older: never shown
    (tmp_path / "2026-11-23.json").write_text(json.dumps(_speed_doc(old)))
    monkeypatch.setattr(tables, "RESULTS", tmp_path)
    out = tables.speed()
    ip_sp_row = next(line for line in out.splitlines() if line.startswith("| Isolated- vs Shared-Policy"))
    assert "1.04 (IP/SP)" in ip_sp_row and "IP/SP ≤" in ip_sp_row
    trl_rows = [line for line in out.splitlines() if line.startswith("| single-agent GRPO")]
    flat = " ".join(out.split())  # the note under the table is wrapped
    assert "gradient checkpointing on (TRL's default)" in trl_rows[0] and "**2.90×**" in trl_rows[0]
    assert ("field holds SP/IP (0.96)" in flat) == old
    if old:
        assert len(trl_rows) == 1 and "predates provenance records (no commit or weights hash)" in flat
        assert "not its gradient-checkpointing setting" in flat
    else:
        assert len(trl_rows) == 2 and "gradient checkpointing off" in trl_rows[1] and "**2.45×**" in trl_rows[1]
        assert "commit abcdef1" in flat and "Goal missed in this run: `mixed_adapter_ratio` 0.874" in flat


def test_the_speed_table_shows_the_newest_run_and_a_same_day_rerun_is_newer(tmp_path, monkeypatch):
    from benchmarks import tables
    from benchmarks.run import dated_result

    monkeypatch.setattr(tables, "RESULTS", tmp_path)
    for name in ("2026-11-23.json", "2026-11-28.json", "notes.json", "real_speed.json"):
        (tmp_path / name).write_text("{}")
    assert tables.speed_file() == "2026-11-28.json"
    again = dated_result(tmp_path, "2026-11-28")
    assert again.name == "2026-11-28_2.json"
    again.write_text("{}")
    assert dated_result(tmp_path, "2026-11-28").name == "2026-11-28_3.json"
    assert tables.speed_file() == "2026-11-28_2.json"


def test_every_rendered_table_names_its_result_file():
    from benchmarks import tables

    for name in ("speed", "speed_notes", "compute_notes", "claims_deliberation"):
        assert "benchmarks/results/" in " ".join(tables.TABLES[name]().split()), name


def test_the_role_shape_table_pairs_shared_with_isolated_by_seed(tmp_path, monkeypatch):
    """The aggregator's last-ten length under Shared- minus Isolated-Policy, paired by seed (a
    seed without its isolated twin is left out); a role with a policy of its own says so."""
    from benchmarks import tables_grid

    monkeypatch.setattr(tables_grid, "RESULT", tmp_path / "real_grid.json")

    def run(routing, seed, agg_len, share):
        return {"cell": f"voting-{routing}-{seed}", "kind": "run", "status": "done",
                "labels": {"workflow": "voting", "routing": routing, "seed": f"seed{seed}"},
                "role_shapes": {"aggregator": {"len_p50": [15.0, agg_len], "grad_share": [share, share]}}}

    doc = {"provenance": {"commit": "abc1234", "date": "2026-11-29"}, "cells": {"done": 5},
           "runs": [run("shared", 0, 9.0, 0.3), run("shared", 1, 17.0, 0.25), run("shared", 2, 11.0, 0.35),
                    run("isolated", 0, 5.0, 1.0), run("isolated", 1, 3.0, 1.0)]}
    (tmp_path / "real_grid.json").write_text(json.dumps(doc))
    out = tables_grid.real_grid_role_shapes()
    # differences 4 and 14: mean 9, 95 % t half-width 12.706 * 7.07 / sqrt 2 = 63.5
    assert "| voting shared | aggregator | 15.0 (15.0–15.0) → 12.3 (9.0–17.0) | 0.30 (0.25–0.35) → " \
           "0.30 (0.25–0.35) | +9.0 [-54.5, +72.5] (2 seeds) |" in out
    assert "| voting isolated | aggregator | 15.0 (15.0–15.0) → 4.0 (3.0–5.0) | its own policy | – |" in out


def test_the_interventions_table_shows_each_arm_and_its_paired_effect(tmp_path, monkeypatch):
    """Each arm's runs over seeds beside the grid's own runs of the cell, then arm − none with its
    interval (one seed: none); a cell without interventions yet says so."""
    from benchmarks import tables_grid

    monkeypatch.setattr(tables_grid, "INTERVENTIONS", tmp_path / "real_interventions.json")
    assert "No interventions recorded yet" in tables_grid.real_interventions()
    stats = lambda peak, final, fall, gap: {"peak": peak, "final": final, "fall": fall, "base": 0.3, "role_gap": gap}  # noqa: E731
    doc = {"provenance": {"commit": "abc1234", "date": "2026-11-30"}, "cell": "voting-isolated",
           "grid": {"axes": {"seed": [0, 1, 2]}},
           "none": {"seed0": stats(0.7, 0.7, 0.0, -0.02), "seed1": stats(0.6, 0.5, 0.12, 0.0), "seed2": stats(0.5, 0.5, 0.0, None)},
           "runs": {"kl_anchor": {"seed0": stats(0.72, 0.7, 0.05, 0.01), "seed1": stats(0.6, 0.6, 0.0, 0.0)},
                    "coherence": {"seed0": stats(0.6, 0.6, 0.0, -0.03)}},
           "effects": {"kl_anchor": {"seeds": ["seed0", "seed1"], "peak": {"mean": 0.01, "ci95": [-0.12, 0.14], "n": 2},
                                     "final": {"mean": 0.05, "ci95": [-0.6, 0.7], "n": 2},
                                     "fall": {"mean": -0.035, "ci95": [-0.5, 0.4], "n": 2},
                                     "role_gap": {"mean": 0.015, "ci95": [-0.2, 0.2], "n": 2}},
                       "coherence": {"seeds": ["seed0"], "peak": {"mean": -0.1, "ci95": None, "n": 1},
                                     "final": {"mean": -0.1, "ci95": None, "n": 1}, "fall": {"mean": 0.0, "ci95": None, "n": 1},
                                     "role_gap": {"mean": -0.01, "ci95": None, "n": 1}}}}
    (tmp_path / "real_interventions.json").write_text(json.dumps(doc))
    table = tables_grid.real_interventions()
    assert "| none (the grid's runs) | 3 of 3 | 0.60 (0.50–0.70) | 0.57 (0.50–0.70) | 0.04 (0.00–0.12) | -0.01 (-0.02–0.00) |" in table
    assert "| kl_anchor | 2 of 3 |" in table and "| coherence | 1 of 3 | 0.60 |" in table
    assert "| kl_anchor | 2 | +0.01 [-0.12, +0.14] |" in table
    assert "| coherence | 1 | -0.10 (one seed, no interval) |" in table
    assert "recorded 2026-11-30 at commit abc1234" in table


def test_role_gap_is_the_role_minus_its_best_trivial_rule():
    from benchmarks.tables_grid import role_gap

    assert role_gap({"voting/selection_acc": 0.9, "voting/rule_first_acc": 0.92, "voting/rule_majority_acc": 0.95}) \
        == pytest.approx(-0.05)
    assert role_gap({"eval_opt/evaluator_accuracy": 0.7, "eval_opt/rule_always_correct_acc": 0.6}) == pytest.approx(0.1)
    assert role_gap({"voting/selection_acc": 0.9}) is None and role_gap({}) is None  # no rule on the same episodes


def test_the_mpdf_tables_pair_the_trained_policy_by_seed_and_show_its_actions(tmp_path, monkeypatch):
    """Each deliberator per seed and its mean, SoftRankPO minus each paired by seed with a 95 % t
    interval; the action rates per round at SoftRankPO's first and last evaluation; a seed kept
    from an earlier record named by seed with where it was recorded."""
    from benchmarks import tables_deliberation
    from benchmarks.deliberation import summary

    monkeypatch.setattr(tables_deliberation, "REAL", tmp_path / "d.json")
    assert "No record yet" in tables_deliberation.mpdf_real()

    def run(seed, trained, persist):
        acc = dict(persist=persist, refine=0.2, concede=0.3, sft=persist, trained=trained, oracle=0.6)
        curve = [{"softrank_step": s, "accuracy": trained, "round0_persist": p, "round0_refine": 1 - p,
                  "round0_concede": 0.0, "round1_persist": 1.0, "round1_refine": 0.0, "round1_concede": None,
                  "round2_persist": None, "round2_refine": None, "round2_concede": None}
                 for s, p in ((0, 1.0), (300, 0.5 + seed / 10))]
        return {"seed": seed, "validation": {k: {"accuracy": v} for k, v in acc.items()}, "action_curve": curve}

    doc = summary([{**run(0, 0.40, 0.37), "kept_from": {"commit": "fedcba9", "date": "2026-12-01",
                                                        "versions": {"transformers": "5.24.0"}}},
                   run(1, 0.30, 0.35)], "configs/real/smollm2-deliberation.yaml")
    (tmp_path / "d.json").write_text(json.dumps({**doc, "provenance": {"commit": "abc1234", "date": "2026-12-04"}}))
    table = tables_deliberation.mpdf_real()
    rows = {line.split(" | ")[0]: line for line in table.splitlines() if line.startswith("| ")}
    # 0.40 - 0.37, 0.30 - 0.35: mean -0.01, t(1) = 12.71 times the standard error 0.04
    assert rows["| always PERSIST (majority of the first answers)"] == \
        "| always PERSIST (majority of the first answers) | 0.37 | 0.35 | 0.360 | -0.01 [-0.52, +0.50], detectable ≥ 0.56 |"
    assert rows["| **SoftRankPO**"] == "| **SoftRankPO** | 0.40 | 0.30 | 0.350 | – |"
    assert "2 of 3 seeds" in table and "commit abc1234" in table
    assert "kept from the record of 2026-12-01 at commit fedcba9 (transformers 5.24.0): seed 0" in table
    actions = tables_deliberation.mpdf_real_actions()
    assert "| 1 | 1.00 → 0.55 | 0.00 → 0.45 | 0.00 → 0.00 |" in actions  # round 0: (0.5 + 0.6) / 2 at step 300
    assert "| 2 | 1.00 → 1.00 | 0.00 → 0.00 | – → – |" in actions  # a rate never recorded is not a zero
    assert "| 3 |" not in actions  # a round the config did not run
    assert "SoftRankPO step 0 → 300, greedy on validation, mean of 2 seeds" in actions
