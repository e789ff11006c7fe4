"""The paper's matrix at CPU scale, end to end: `configs/grids/cpu.yaml` through the real CLI.

Runs `rolecall grid configs/grids/cpu.yaml` (eval_opt, voting and orch_workers x Shared- and
Isolated-Policy on the embedded model and the built-in arithmetic task, plus the base-model
evaluation and the single-agent RL control), then `rolecall grid report`, and records the
wall time, the model it ran on and the report's tables in `benchmarks/results/grid_cpu/`.
The bar: the whole grid within 90 minutes on this 2-core machine, no failed cell.

    python benchmarks/grid_cpu.py                  # cells one after another
    python benchmarks/grid_cpu.py --ray            # each cell a task on a local Ray instance
    python benchmarks/grid_cpu.py --resume DIR     # continue a stopped grid (its wall time adds up)

Exits 1 when the bar is not met.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.children import HERE, run_child  # noqa: E402
from benchmarks.provenance import write_result  # noqa: E402

GRID = HERE.parent / "configs" / "grids" / "cpu.yaml"
RESULTS = HERE / "results" / "grid_cpu"
BAR_S = 90 * 60


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs-dir", type=Path, default=Path("/tmp/rolecall-bench"))
    ap.add_argument("--resume", type=Path, help="a grid directory this script started earlier")
    ap.add_argument("--ray", action="store_true", help="run each cell as a Ray task on a local instance")
    a = ap.parse_args()
    out = a.resume or a.runs_dir / f"grid-cpu-{int(time.time())}"
    timing = out / "bench_wall.json"
    spent = json.loads(timing.read_text())["wall_s"] if a.resume and timing.is_file() else 0.0
    cmd = [sys.executable, "-m", "rolecall", "grid", str(GRID), "--out", str(out)]
    cmd += ["--resume"] if a.resume else []
    cmd += ["--ray"] if a.ray else []
    t0 = time.time()
    failed = False
    try:
        run_child(cmd, cwd=HERE.parent)
    except Exception as e:  # noqa: BLE001 - a failed cell exits 1; the report still shows the rest
        print(f"grid: {e}", file=sys.stderr)
        failed = True
    finally:
        out.mkdir(parents=True, exist_ok=True)
        timing.write_text(json.dumps({"wall_s": round(spent + time.time() - t0, 1)}))
    wall = json.loads(timing.read_text())["wall_s"]
    run_child([sys.executable, "-m", "rolecall", "grid", "report", str(out)], cwd=HERE.parent)
    trained = [p / "fingerprint.json" for p in sorted(out.iterdir()) if (p / "fingerprint.json").is_file()]
    weights = json.loads(trained[0].read_text())["model"].get("weights") if trained else None
    RESULTS.mkdir(parents=True, exist_ok=True)
    for name in ("report.md", "table1.csv", "table2.csv"):
        if (out / "report" / name).is_file():
            shutil.copy(out / "report" / name, RESULTS / name)
    met = wall <= BAR_S and not failed
    write_result(RESULTS / "run.json", {
        "grid": str(GRID.relative_to(HERE.parent)), "executor": "ray (local)" if a.ray else "sequential",
        "wall_s": wall, "bar_s": BAR_S, "failed_cells": failed, "met": met, "base_weights": weights,
        "date": time.strftime("%Y-%m-%d"), "machine": {"cpus": os.cpu_count(), "python": platform.python_version()}})
    print(f"cpu grid: {wall / 60:.1f} min ({'bar met' if met else 'bar NOT met'}); tables in {RESULTS}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
