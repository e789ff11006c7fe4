"""The toy game of "MAPoRL: Multi-Agent Post-Co-Training for Collaborative Large Language Models
with Reinforcement Learning" (section 2.3): does a single learner facing a fixed partner who
collaborates with probability 0.5, 0.6 or 0.7 learn to avoid collaboration, while two co-trained
learners reach it? Runs examples/collaboration_game.py (numpy only, no model), 5 seeds, plus the
variants that show how much the outcome rests on the learner and the questions chosen.

    python benchmarks/collaboration_game.py                      # ~1 minute on one core
    python benchmarks/collaboration_game.py --seeds 0,1,2 --no-sensitivity

Writes benchmarks/results/collaboration_game.json (parameters, questions, curves every 5th
iteration, final collaboration rate per arm with its spread across seeds, the exact
best-response check, the sensitivity variants, wall time) and docs/img/collaboration_game.svg,
and prints a markdown table.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.provenance import write_result  # noqa: E402
from examples.collaboration_game import LearnerSpec, dumps, experiment, summary_table, write_svg  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "collaboration_game.json"
PLOT = ROOT / "docs" / "img" / "collaboration_game.svg"
CURVE_EVERY = 5  # iterations between stored curve points; the plot uses every iteration


def thin_curves(results: dict) -> None:
    """Keep every CURVE_EVERY-th point (and the last) of each curve, with its iteration number."""
    for arm in results["arms"].values():
        n = len(arm["curves"]["collab_rate"]["mean"])
        keep = sorted({*range(0, n, CURVE_EVERY), n - 1})
        for series in arm["curves"].values():
            for stat in series:
                series[stat] = [series[stat][i] for i in keep]
        arm["curves"]["iteration"] = keep


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--iterations", type=int, default=LearnerSpec.iterations)
    ap.add_argument("--no-sensitivity", action="store_true", help="only the main experiment (~20 s)")
    a = ap.parse_args()
    t0 = time.time()
    results = experiment([int(s) for s in a.seeds.split(",")], a.iterations, not a.no_sensitivity)
    results["total_wall_s"] = round(time.time() - t0, 1)
    results["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version(), "numpy": np.__version__,
                          "date": time.strftime("%Y-%m-%d")}
    results["command"] = "python benchmarks/collaboration_game.py " + " ".join(sys.argv[1:])
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    write_svg(results, PLOT)  # from the full-resolution curves
    thin_curves(results)
    RESULTS.parent.mkdir(exist_ok=True)
    write_result(RESULTS, results, model_dir=None, dumps=dumps)
    print(summary_table(results))
    print(f"\nwall time {results['total_wall_s']} s (main experiment {results['wall_s']} s); "
          f"wrote {RESULTS.relative_to(ROOT)} and {PLOT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
