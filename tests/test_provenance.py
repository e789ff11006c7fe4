"""benchmarks/provenance.py: what every result records, and that no result is overwritten."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.provenance import append_result, latest, provenance, provenance_of, write_result  # noqa: E402


def _model(tmp_path: Path) -> Path:
    d = tmp_path / "model"
    d.mkdir()
    (d / "model.safetensors").write_bytes(b"weights")
    (d / "config.json").write_text("{}")  # not a weight file: not hashed
    return d


def test_provenance_names_the_code_weights_versions_machine_and_command(tmp_path):
    import hashlib

    p = provenance(_model(tmp_path), matmul=False)
    assert re.fullmatch(r"[0-9a-f]{40}", p["commit"]) and isinstance(p["dirty"], bool)
    assert p["model_sha256"] == hashlib.sha256(b"weights").hexdigest()
    assert p["versions"]["torch"] and "transformers" in p["versions"]
    assert p["machine"]["cores"] >= 1 and p["machine"]["matmul_gflops"] is None
    assert p["date"][:2] == "20" and p["command"]


def test_write_result_stamps_the_summary_and_appends_every_version_to_its_history(tmp_path):
    out, history = tmp_path / "bench.json", tmp_path / "history"
    first = write_result(out, {"ratio": 1.5}, model_dir=_model(tmp_path), history=history)
    write_result(out, {"ratio": 2.0}, model_dir=None, history=history)
    summary = json.loads(out.read_text())
    assert summary["ratio"] == 2.0 and provenance_of(summary)["commit"] == first["provenance"]["commit"]
    assert provenance_of(summary)["model_sha256"] is None
    lines = [json.loads(line) for line in (history / "bench.jsonl").read_text().splitlines()]
    assert [d["ratio"] for d in lines] == [1.5, 2.0]  # the older result is still there
    assert lines[0]["provenance"]["model_sha256"] == first["provenance"]["model_sha256"]
    write_result(out, {"xs": [1, 2]}, model_dir=None, history=history, dumps=lambda d: json.dumps(d))
    assert "\n" not in out.read_text().strip() and len((history / "bench.jsonl").read_text().splitlines()) == 3
    # next to the file by default
    write_result(tmp_path / "sub" / "x.json", {"a": 1}, model_dir=None)
    assert (tmp_path / "sub" / "history" / "x.jsonl").is_file()


def test_append_result_keeps_earlier_entries_and_latest_picks_the_newest_per_measure(tmp_path):
    f = tmp_path / "r.json"
    for i, name in enumerate(["a", "b", "a"]):
        append_result(f, "runs", {"config": name, "value": i})
    runs = json.loads(f.read_text())["runs"]
    assert [r["value"] for r in runs] == [0, 1, 2]
    assert sorted((r["config"], r["value"]) for r in latest(runs, "config")) == [("a", 2), ("b", 1)]


# What may write JSON without write_result or append_result: the dated speed file (a new name
# each run, stamped by provenance() itself), a grid's timing or a finished seed's record (for
# --resume) in its own run folder, a child's scratch output.
_WRITE = re.compile(r"\.write_text\(\s*(json\.)?dumps|json\.dump\(")
_ALLOWED = {"run.py": "args.out.write_text", "grid_cpu.py": "timing.write_text", "data_parallel.py": "Path(out).write_text",
            "deliberation.py": "kept.write_text"}


def test_every_benchmark_that_writes_a_result_records_its_provenance():
    bad = {}
    for script in sorted((ROOT / "benchmarks").glob("*.py")):
        if script.name == "provenance.py":
            continue
        text, allowed = script.read_text(), _ALLOWED.get(script.name)
        found = [" ".join(text[m.start() - 40:m.end()].split()) for m in _WRITE.finditer(text)
                 if not (allowed and allowed in text[max(0, m.start() - 60):m.end()])]
        if found:
            bad[script.name] = found
    assert not bad, f"benchmarks writing JSON without write_result/append_result: {bad}"
