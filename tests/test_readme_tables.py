"""The README's tables are rendered from benchmarks/results/ (benchmarks/tables.py), never copied."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.tables import BLOCK, TABLES, render  # noqa: E402


def test_every_readme_table_matches_its_results():
    text = (ROOT / "README.md").read_text()
    names = [m.group("name") for m in BLOCK.finditer(text)]
    assert names and set(names) <= set(TABLES)
    _, changed = render(text)
    assert changed == [], f"stale README tables {changed}: run python -m benchmarks.tables"


def test_a_hand_edited_number_is_caught():
    text = (ROOT / "README.md").read_text()
    m = next(BLOCK.finditer(text))
    edited = text[:m.start("body")] + m.group("body").replace("0.", "9.", 1) + text[m.end("body"):]
    assert render(edited)[1] == [m.group("name")]


def test_speed_table_states_which_ratio_it_shows_and_what_the_file_lacks():
    import json

    from benchmarks import tables

    doc = json.loads((tables.RESULTS / tables.SPEED_FILE).read_text())
    cost = doc["details"]["ip_sp_cost"]
    out = tables.speed()
    ip_sp_row = next(line for line in out.splitlines() if line.startswith("| Isolated- vs Shared-Policy"))
    assert f"{cost['ip_s_per_ktoken'] / cost['sp_s_per_ktoken']:.2f} (IP/SP)" in ip_sp_row
    assert "IP/SP ≤" in ip_sp_row
    trl_row = next(line for line in out.splitlines() if line.startswith("| single-agent GRPO"))
    assert "gradient checkpointing on" in trl_row
    flat = " ".join(out.split())  # the note under the table is wrapped
    if not doc.get("commit"):
        assert "predates provenance records (no commit or weights hash)" in flat
    assert doc["date"] in flat


def _learning_doc(val_curve, budget_s=900.0):
    within = [v for v in val_curve if v["elapsed_s"] <= budget_s]
    return {"machine": {"cpus": 2, "torch": "x", "date": "2026-01-01"},
            "runs": {"orch_workers-shared": {
                "workflow": "orch_workers", "routing": "shared", "command": "rolecall train train.steps=60",
                "wall_s": val_curve[-1]["elapsed_s"] + 4, "base_weights": "w",
                "optimizer_steps_per_iteration": {"shared": 5},
                "val_curve": val_curve, "base_accuracy": val_curve[0]["accuracy"], "budget_s": budget_s,
                "final_within_budget": within[-1],
                "gain_points": round(100 * (within[-1]["accuracy"] - val_curve[0]["accuracy"]), 1)}}}


def test_learning_peak_counts_only_validations_within_the_budget(tmp_path, monkeypatch):
    import json

    from benchmarks import tables

    curve = [{"step": 0, "elapsed_s": 20.0, "accuracy": 0.25}, {"step": 10, "elapsed_s": 400.0, "accuracy": 0.405},
             {"step": 20, "elapsed_s": 800.0, "accuracy": 0.53}, {"step": 30, "elapsed_s": 960.0, "accuracy": 0.6}]
    (tmp_path / "learning.json").write_text(json.dumps(_learning_doc(curve)))
    monkeypatch.setattr(tables, "RESULTS", tmp_path)
    out = tables._learning_rows("w")
    row = next(line for line in out.splitlines() if line.startswith("| orch_workers"))
    assert "| 0.530 (20) | 0.530 (20, 13.3) |" in row and "0.600 (30)" not in row
    assert "0.600 at step 30 (16.0 min)" in " ".join(out.split())  # the left-out validation is named under the table


def test_every_rendered_table_names_its_result_file():
    from benchmarks import tables

    for name in ("speed", "learning_current", "learning_older", "claims_debate", "claims_chain", "claims_deliberation"):
        assert "benchmarks/results/" in " ".join(tables.TABLES[name]().split()), name
