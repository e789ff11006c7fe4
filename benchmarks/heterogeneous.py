"""Does a team on two different base models learn? Voting with its generators on the embedded
model and its aggregator on a second, smaller base.

The second base is built here, reproducibly and offline: the embedded model cut to its first
2 of 4 transformer layers (half the depth, 0.8 M instead of 1.6 M parameters; the same
character tokenizer). `configs/examples/voting.yaml` then trains through the real CLI with
`policies.aggregator.model=<that base>`: two bases in one process, each with its own engine,
each training its own adapter.

    python benchmarks/heterogeneous.py                 # 100 steps, validation every 10
    python benchmarks/heterogeneous.py --steps 60

The bar: validation accuracy rises at least 10 points over step 0 within 15 minutes of wall
time (exit 1 if not). Writes benchmarks/results/heterogeneous.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.provenance import write_result  # noqa: E402
from benchmarks.children import CONFIGS, HERE, clear_own, run_child  # noqa: E402

RESULT = HERE / "results" / "heterogeneous.json"


def build_small_base(out: Path, keep_layers: int = 2) -> dict:
    """The embedded model's first `keep_layers` layers, its embeddings, final norm and head."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rolecall.policies.model import embedded_dir

    model = AutoModelForCausalLM.from_pretrained(embedded_dir())
    full = model.config.num_hidden_layers
    model.model.layers = model.model.layers[:keep_layers]
    model.config.num_hidden_layers = keep_layers
    if getattr(model.config, "layer_types", None):
        model.config.layer_types = model.config.layer_types[:keep_layers]
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(embedded_dir()).save_pretrained(out)
    return {"layers": f"{keep_layers} of {full}", "params": sum(p.numel() for p in model.parameters())}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--budget-min", type=float, default=15.0)
    ap.add_argument("--out", type=Path, default=Path("/tmp/rolecall-bench-heterogeneous"))
    args = ap.parse_args()
    clear_own(args.out, "run/rolecall-run.json", "small-base/config.json")
    base = args.out / "small-base"
    small = build_small_base(base)
    run = args.out / "run"
    cmd = [sys.executable, "-m", "rolecall", "train", str(CONFIGS / "voting.yaml"), "routing=isolated",
           f"policies.aggregator.model={base}", "policies.generator.trainable=true",
           f"train.steps={args.steps}", "train.val_every=10", "--out", str(run)]
    t0 = time.time()
    run_child(cmd, env={**os.environ, "HF_HUB_OFFLINE": "1"}, cwd=HERE.parent)
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    curve = [{"step": r["step"], "elapsed_s": r["time/elapsed_s"], "accuracy": r["val/accuracy"],
              "aggregator_fallback": r.get("val/voting/aggregator_fallback")} for r in rows if "val/accuracy" in r]
    budget = args.budget_min * 60
    start = curve[0]["accuracy"]
    within = [p for p in curve if p["elapsed_s"] <= budget]
    best = max(within, key=lambda p: p["accuracy"])
    passed = best["accuracy"] - start >= 0.10
    fp = json.loads((run / "fingerprint.json").read_text())["model"]
    result = {"command": "rolecall train " + " ".join(cmd[4:]).replace(str(HERE.parent) + "/", ""),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d"),
              "bases": {"generator": {"model": "embedded", "weights": fp["weights"]},
                        "aggregator": {"model": "embedded cut to 2 layers", **small,
                                       "weights": fp["policy_bases"]["aggregator"]["weights"]}},
              "step0_accuracy": start, "best_within_budget": best, "final": curve[-1],
              "wall_s": round(time.time() - t0, 1), "budget_s": budget,
              "bar": "validation accuracy +10 points over step 0 within the budget", "passed": passed,
              "val_curve": curve}
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    write_result(RESULT, result)
    print(f"step 0 {start:.3f} -> best {best['accuracy']:.3f} at step {best['step']} ({best['elapsed_s']:.0f}s); "
          f"bar {'met' if passed else 'NOT met'}; wrote {RESULT}")
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
