"""Does `rolecall train` learn on this machine? Every shipped workflow, Isolated- vs Shared-Policy.

Runs the embedded default through the real CLI — `configs/examples/<workflow>.yaml` with
`routing=isolated` and `routing=shared` — and reads each run's metrics.jsonl: the step-0
validation accuracy (the untrained base) and the validation accuracy reached within the
wall-clock budget. The single-agent control has one role, so its two routings are the same
run; it is run once.

    python benchmarks/learning.py                                  # voting, both routings
    python benchmarks/learning.py --workflows single,voting,eval_opt,orch_workers
    python benchmarks/learning.py --workflows eval_opt --only shared --budget-min 15

Writes benchmarks/results/learning.json (runs are merged by name, so a partial rerun keeps
the others) and prints a markdown table.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.provenance import write_result  # noqa: E402

HERE = Path(__file__).resolve().parent
CONFIGS = HERE.parent / "configs" / "examples"


def run_child(cmd: list[str], **kw) -> None:
    """Run a training command to the end. If this driver is stopped (Ctrl-C, or SIGTERM from
    `kill`/`pkill`), the child is stopped too: an orphaned run would keep the CPU and skew
    every timed benchmark after it. SIGTERM (not SIGINT, which a driver started with `&`
    passes on ignored) lets the trainer save its step first."""
    def on_term(signum, frame):
        raise KeyboardInterrupt
    proc = subprocess.Popen(cmd, **kw)
    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        rc = proc.wait()
    except KeyboardInterrupt:
        rc = None  # stopped: the child is stopped below, then this driver exits without a traceback
    finally:
        signal.signal(signal.SIGTERM, previous)
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
    if rc is None:
        print(f"stopped: {' '.join(map(str, cmd[:4]))} ... was stopped too (a training run saves its step first)",
              file=sys.stderr)
        raise SystemExit(130)
    if rc:
        raise subprocess.CalledProcessError(rc, cmd)


def clear_own(out: Path, *markers: str) -> None:
    """Remove `out` before a benchmark writes it again, only when a file this benchmark leaves
    there (`markers`, relative to `out`) shows the benchmark wrote it; refuse any other folder,
    so a mistyped --out never deletes a user's files."""
    if not out.exists():
        return
    if not any((out / m).exists() for m in markers):
        raise SystemExit(f"{out} exists and was not written by this benchmark (none of {', '.join(markers)} "
                         "in it); choose another --out")
    import shutil

    shutil.rmtree(out)


def run(workflow: str, routing: str, out: Path, extra: list[str]) -> dict:
    cmd = [sys.executable, "-m", "rolecall", "train", str(CONFIGS / f"{workflow}.yaml"), f"routing={routing}",
           "--out", str(out), *extra]
    t0 = time.time()
    # From the repository root: a user workflow config names `examples.<module>:<Class>`.
    run_child(cmd, env={**os.environ, "HF_HUB_OFFLINE": "1"}, cwd=HERE.parent)
    wall = time.time() - t0
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    # Which base weights the run started from: a rebuilt embedded model starts elsewhere.
    weights = json.loads((out / "fingerprint.json").read_text())["model"].get("weights")
    val = [(r["step"], r["time/elapsed_s"], r["val/accuracy"]) for r in rows if "val/accuracy" in r]
    steps = [r for r in rows if "time/step_s" in r]
    opt = {k.split("/")[1]: v for k, v in (steps[-1] if steps else {}).items() if k.endswith("/optimizer_steps")}
    chi2_later = [r.get("policy/generator/chi2_token_mb1") for r in steps]
    return {"workflow": workflow, "routing": routing,
            "command": "rolecall train " + " ".join(cmd[4:]).replace(str(HERE.parent) + "/", ""),
            "wall_s": round(wall, 1), "base_weights": weights, "optimizer_steps_per_iteration": opt,
            "max_chi2_token_mb1_generator": max((x for x in chi2_later if x is not None), default=None),
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
    ap.add_argument("--workflows", default="voting", help="comma-separated: single,voting,eval_opt,orch_workers,chain,debate")
    ap.add_argument("--only", choices=["isolated", "shared"])
    ap.add_argument("--runs-dir", type=Path, default=Path("/tmp/rolecall-bench"))
    ap.add_argument("extra", nargs="*", help="extra `key=value` overrides passed to rolecall train")
    a = ap.parse_args()
    results_file = HERE / "results" / "learning.json"
    results = json.loads(results_file.read_text()) if results_file.exists() else {}
    results.setdefault("runs", {})
    import torch

    results["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
                          "date": time.strftime("%Y-%m-%d")}
    for wf in a.workflows.split(","):
        routings = ["isolated"] if wf == "single" else [a.only] if a.only else ["isolated", "shared"]
        for routing in routings:
            out = a.runs_dir / f"{wf}-{routing}-{int(time.time())}"
            results["runs"][f"{wf}-{routing}"] = summarize(run(wf, routing, out, a.extra), a.budget_min * 60)
            results_file.parent.mkdir(exist_ok=True)
            write_result(results_file, results)  # after each run: a crash keeps the rest
    print("| workflow | routing | step 0 (base) | best ≤ budget | at end (≤ budget) | gain (points) | optimizer steps / iteration | wall time |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r in results["runs"].items():
        f = r["final_within_budget"]
        opt = ", ".join(f"{k} {v}" for k, v in r.get("optimizer_steps_per_iteration", {}).items())
        print(f"| {r['workflow']} | {r['routing']} | {r['base_accuracy']:.3f} | {r['best_within_budget']:.3f} | "
              f"{f['accuracy']:.3f} (step {f['step']}, {f['elapsed_s'] / 60:.1f} min) | {r['gain_points']:+.1f} | {opt} "
              f"| {r['wall_s'] / 60:.1f} min |")


if __name__ == "__main__":
    main()
