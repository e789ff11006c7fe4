"""benchmarks/real_learning.py reads a finished run back: base, best, role formats, the workflow's metrics."""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import real_learning  # noqa: E402


def _run(tmp_path: Path) -> Path:
    rows = [
        {"step": 0, "time/elapsed_s": 90.0, "val/accuracy": 0.26, "val/voting/aggregator_parsed": 0.72,
         "val/voting/selection_acc": 0.51, "val/role/aggregator/entropy": 0.9, "val/policy/shared/kl": 0.0},
        {"step": 1, "time/elapsed_s": 150.0, "reward/mean": 0.3, "voting/aggregator_parsed": 0.9,
         "role/aggregator/truncated_frac": 0.25, "role/aggregator/entropy": 0.8},
        {"step": 5, "time/elapsed_s": 400.0, "val/accuracy": 0.5, "val/voting/aggregator_parsed": 0.97,
         "val/voting/selection_acc": 0.8},
        {"step": 10, "time/elapsed_s": 700.0, "val/accuracy": 0.5, "val/voting/aggregator_parsed": 0.99,
         "val/voting/selection_acc": 0.85},
        {"event": "stop", "reason": "max_minutes"},
    ]
    d = tmp_path / "voting-sp-20261128-033845"
    d.mkdir()
    (d / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return d


def test_a_run_is_read_back_with_the_earliest_best_and_its_metrics(tmp_path):
    out = real_learning.read_run(_run(tmp_path))
    assert (out["base"], out["best"], out["best_step"], out["minutes_to_best"]) == (0.26, 0.5, 5, 6.7)
    assert out["role_format"] == {"aggregator": 0.97} and out["role_format_base"] == {"aggregator": 0.72}
    assert out["val_metrics"]["base"] == {"accuracy": 0.26, "voting/aggregator_parsed": 0.72, "voting/selection_acc": 0.51}
    assert out["val_metrics"]["best"]["voting/selection_acc"] == 0.8
    assert out["curve"] == [[0, 0.26, 1.5], [5, 0.5, 6.7], [10, 0.5, 11.7]] and out["stopped"] == "max_minutes"


def test_details_appends_finished_runs_without_training(tmp_path, monkeypatch, capsys):
    result = tmp_path / "real_learning.json"
    result.write_text(json.dumps({"runs": [{"config": "kept"}]}))
    monkeypatch.setattr(real_learning, "RESULT", result)
    monkeypatch.setattr(real_learning, "learn", lambda *a, **k: (_ for _ in ()).throw(AssertionError("trained")))
    monkeypatch.setattr(sys, "argv", ["real_learning.py", "--details", str(_run(tmp_path))])
    real_learning.main()
    doc = json.loads(result.read_text())
    assert doc["runs"] == [{"config": "kept"}]
    (entry,) = doc["details"]
    assert entry["config"] == "configs/real/smollm2-voting-sp.yaml" and entry["best_step"] == 5
    assert entry["val_metrics"]["best"]["voting/selection_acc"] == 0.8 and entry["commit"]
    assert [(v["step"], v["minutes"], v["voting/selection_acc"]) for v in entry["val_metrics_curve"]] == [
        (0, 1.5, 0.51), (5, 6.7, 0.8), (10, 11.7, 0.85)]
    assert entry["train_curve"] == [{"step": 1, "reward/mean": 0.3, "voting/aggregator_parsed": 0.9,
                                     "role/aggregator/truncated_frac": 0.25}]
