"""Does search_answer learn, and does the cross-agent abstention signal matter?

Runs `configs/examples/search_answer.yaml` through the real CLI twice on the same seed: as
shipped, and with `workflow.options.abstain_signal=false` (the DAC paper's falsification test:
both abstention terms removed, nothing else changed). Reads validation F1, EM, abstention
and evidence-sufficiency rates from each run's metrics.jsonl and records them with the base
weights the runs started from.

    python benchmarks/search_answer.py                         # both arms, 15 minutes each
    python benchmarks/search_answer.py --model /tmp/base       # on another base model
    python benchmarks/search_answer.py --steps 60 --only full
    python benchmarks/search_answer.py --set workflow.options.alpha=0.2   # other coefficients, both arms

The bar: validation F1 rises over its step-0 value within 15 minutes, by more than chance
(exit 1 if not). Every validation episode is logged, so the rise is taken per problem, paired
with step 0, with a 95 % bootstrap interval whose low end must be above 0: a rise from near 0
on 200 problems can be one lucky answer.
Writes benchmarks/results/search_answer.json (arms merged by name, and by the --set overrides).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.provenance import write_result  # noqa: E402
from benchmarks.children import CONFIGS, HERE, run_child  # noqa: E402

RESULT = HERE / "results" / "search_answer.json"
ARMS = {"full": [], "no_abstain_signal": ["workflow.options.abstain_signal=false"]}
KEYS = ("f1", "em", "abstain_rate", "abstain_precision", "sufficiency_rate", "hops")
N_VAL = 200  # the multihop task's validation split; every episode of it is logged


def f1_by_problem(val_samples: Path, step: int) -> dict[str, float]:
    """Each validation problem's F1 at `step`, as the workflow's val/…/f1 takes it: the verifier's
    token F1, else the reward (an episode cut before its answer counts 0 here)."""
    rows = [json.loads(x) for x in val_samples.read_text().splitlines() if x.strip()]
    return {r["uid"]: float((r["info"].get("verdict") or {}).get("f1", r["reward"] or 0.0))
            for r in rows if r["step"] == step}


def paired_gain(before: dict[str, float], after: dict[str, float], draws: int = 2000, seed: int = 0) -> dict:
    """Mean per-problem F1 gain over the problems scored at both steps, and its 95 % bootstrap
    interval (problems resampled with replacement)."""
    diffs = [after[u] - before[u] for u in sorted(before.keys() & after.keys())]
    if not diffs:
        return {"problems": 0}
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(diffs, k=len(diffs))) / len(diffs) for _ in range(draws))
    return {"problems": len(diffs), "gain": round(sum(diffs) / len(diffs), 4),
            "ci95": [round(means[int(0.025 * draws)], 4), round(means[int(0.975 * draws) - 1], 4)],
            "improved": sum(d > 0 for d in diffs), "worsened": sum(d < 0 for d in diffs)}


def run_arm(name: str, out: Path, steps: int, model: str | None, seed: int, budget_min: float,
            val_every: int, overrides: list[str]) -> dict:
    # The run stops at the budget (train.max_minutes): no validation after it could be judged.
    # The schedule still spans train.steps, so the arms follow the same trajectory.
    cmd = [sys.executable, "-m", "rolecall", "train", str(CONFIGS / "search_answer.yaml"),
           *overrides, *ARMS[name],  # the arm's own switch last, so no override can undo it
           f"train.steps={steps}", f"train.seed={seed}", f"train.val_samples={N_VAL}",
           f"train.max_minutes={budget_min}", f"train.val_every={val_every}", "--out", str(out)]
    cmd += [f"model.path={model}"] if model else []
    t0 = time.time()
    run_child(cmd, env={**os.environ, "HF_HUB_OFFLINE": "1"}, cwd=HERE.parent)
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    weights = json.loads((out / "fingerprint.json").read_text())["model"].get("weights")
    curve = [{"step": r["step"], "elapsed_s": r["time/elapsed_s"],
              **{k: r.get(f"val/search_answer/{k}") for k in KEYS}} for r in rows if "val/accuracy" in r]
    return {"arm": name, "command": "rolecall train " + " ".join(cmd[4:]).replace(str(HERE.parent) + "/", ""),
            "wall_s": round(time.time() - t0, 1), "base_weights": weights, "seed": seed, "val_curve": curve,
            "run_dir": str(out)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--budget-min", type=float, default=15.0)
    ap.add_argument("--val-every", type=int, default=10,
                    help="steps between validations (each takes about 45 s of the budget on 2 cores)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", help="model.path for the runs (default: the embedded model)")
    ap.add_argument("--only", choices=sorted(ARMS))
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override for both arms, e.g. workflow.options.alpha=0.2 (repeatable)")
    ap.add_argument("--runs-dir", type=Path, default=Path("/tmp/rolecall-bench"))
    a = ap.parse_args()
    results = json.loads(RESULT.read_text()) if RESULT.is_file() else {"runs": {}}
    met = True
    for name in [a.only] if a.only else list(ARMS):
        res = run_arm(name, a.runs_dir / f"search-{name}-{int(time.time())}", a.steps, a.model, a.seed,
                      a.budget_min, a.val_every, a.set)
        within = [v for v in res["val_curve"] if v["elapsed_s"] <= a.budget_min * 60]
        start, end = within[0], within[-1]
        res.update(budget_s=a.budget_min * 60, start=start, end_within_budget=end,
                   f1_gain=round((end["f1"] or 0) - (start["f1"] or 0), 4),
                   paired=paired_gain(f1_by_problem(Path(res["run_dir"]) / "val_samples.jsonl", start["step"]),
                                      f1_by_problem(Path(res["run_dir"]) / "val_samples.jsonl", end["step"])))
        if name == "full":  # a rise, and more than chance: the paired interval's low end is above 0
            met = res["f1_gain"] > 0 and res["paired"].get("ci95", [0])[0] > 0
        # Runs with other settings sit beside the defaults' instead of replacing them.
        results["runs"][name if not a.set else f"{name} ({', '.join(a.set)})"] = res
        print(f"{name}: F1 {start['f1']:.3f} -> {end['f1']:.3f} (step {end['step']}, {end['elapsed_s'] / 60:.1f} min), "
              f"abstain {end['abstain_rate']:.2f}, sufficient {end['sufficiency_rate']:.2f}; "
              f"paired gain {res['paired'].get('gain')} (95 % {res['paired'].get('ci95')})")
    results.update(date=time.strftime("%Y-%m-%d"), machine={"cpus": os.cpu_count(), "python": platform.python_version()})
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    write_result(RESULT, results, model_dir=a.model or "embedded")
    print("bar met" if met else "bar NOT met: validation F1 did not rise beyond chance within the budget")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
