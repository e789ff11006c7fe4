"""Does the default `rolecall train` learn on this machine? Isolated- vs Shared-Policy.

Runs the embedded default (voting) twice through the real CLI — `routing=isolated` and
`routing=shared` — and reads each run's metrics.jsonl: the step-0 validation accuracy
(the untrained base), and the validation accuracy reached within the wall-clock budget.

    python benchmarks/learning.py            # both routings, 15-minute budget each
    python benchmarks/learning.py --only shared --budget-min 15

Writes benchmarks/results/learning.json and prints a markdown table.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run(routing: str, out: Path, extra: list[str]) -> dict:
    cmd = [sys.executable, "-m", "rolecall", "train", f"routing={routing}", "--out", str(out), *extra]
    t0 = time.time()
    subprocess.run(cmd, check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    wall = time.time() - t0
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    val = [(r["step"], r["time/elapsed_s"], r["val/accuracy"]) for r in rows if "val/accuracy" in r]
    return {"routing": routing, "command": " ".join(cmd[2:]), "wall_s": round(wall, 1),
            "val_curve": [{"step": s, "elapsed_s": e, "accuracy": a} for s, e, a in val],
            "base_accuracy": val[0][2]}


def summarize(res: dict, budget_s: float) -> dict:
    within = [v for v in res["val_curve"] if v["elapsed_s"] <= budget_s]
    final = within[-1]
    res.update({"budget_s": budget_s, "final_within_budget": final,
                "gain_points": round(100 * (final["accuracy"] - res["base_accuracy"]), 1),
                "best_within_budget": max(v["accuracy"] for v in within)})
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget-min", type=float, default=15.0)
    ap.add_argument("--only", choices=["isolated", "shared"])
    ap.add_argument("--runs-dir", type=Path, default=Path("/tmp/rolecall-bench"))
    ap.add_argument("extra", nargs="*", help="extra `key=value` overrides passed to rolecall train")
    a = ap.parse_args()
    results_file = HERE / "results" / "learning.json"
    results = json.loads(results_file.read_text()) if results_file.exists() else {}
    import torch

    results["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
                          "date": time.strftime("%Y-%m-%d")}
    for routing in [a.only] if a.only else ["isolated", "shared"]:
        out = a.runs_dir / f"{routing}-{int(time.time())}"
        results[routing] = summarize(run(routing, out, a.extra), a.budget_min * 60)
    results_file.parent.mkdir(exist_ok=True)
    results_file.write_text(json.dumps(results, indent=2) + "\n")
    print("| routing | base val/accuracy | val/accuracy at end (≤ budget) | gain (points) | wall time |")
    print("|---|---|---|---|---|")
    for routing in ("isolated", "shared"):
        if routing in results:
            r = results[routing]
            f = r["final_within_budget"]
            print(f"| {routing} | {r['base_accuracy']:.3f} | {f['accuracy']:.3f} (step {f['step']}, {f['elapsed_s'] / 60:.1f} min) "
                  f"| {r['gain_points']:+.1f} | {r['wall_s'] / 60:.1f} min |")


if __name__ == "__main__":
    main()
