"""Does the real tier learn as well in bfloat16 as in float32? Seeds, paired, with intervals.

    rolecall get-model smollm2-135m                       # once
    python benchmarks/real_precision.py                   # single and voting-SP, 3 seeds, both dtypes
    python benchmarks/real_precision.py --configs single --seeds 0 1 2 --steps 40

For each config and seed, the same run is trained twice, `model.dtype=bfloat16` and
`model.dtype=float32`, at the same number of steps (`train.steps`, no early stop), one after
the other so a drift in the machine's speed hits both. Each run's validation accuracy (100
held-out problems, every 5 steps) gives its base (step 0), best and final accuracy, its wall
time and its peak resident memory (`mem/peak_gb`). Per config: the paired difference
bf16 - fp32 of the best and of the final accuracy over the seeds, its mean and 95 % t
interval. A seed pair is recorded as soon as it finishes, so a stopped driver keeps what it
measured; `--summarize` rebuilds the summary from the recorded runs.

Writes benchmarks/results/real_precision.json with provenance.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from statistics import fmean, stdev

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.children import run_child  # noqa: E402  (after the path fix above)
from benchmarks.provenance import provenance, write_result  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULT = HERE / "results" / "real_precision.json"
DTYPES = ("bfloat16", "float32")
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def run_one(config: str, seed: int, dtype: str, steps: int, out: Path) -> dict:
    cmd = [sys.executable, "-m", "rolecall", "train", str(HERE.parent / "configs" / "real" / f"smollm2-{config}.yaml"),
           f"model.dtype={dtype}", f"train.seed={seed}", f"train.steps={steps}", "train.stop_below_peak=null",
           "train.val_every=5", "--out", str(out)]
    t0 = time.time()
    run_child(cmd, env={**os.environ, "HF_HUB_OFFLINE": "1"}, cwd=HERE.parent)
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    val = [(r["step"], r["val/accuracy"]) for r in rows if "val/accuracy" in r and "event" not in r]
    peaks = [r["mem/peak_gb"] for r in rows if "mem/peak_gb" in r]
    return {"config": config, "seed": seed, "dtype": dtype, "steps": steps, "run_dir": str(out),
            "base": val[0][1], "best": max(a for _, a in val), "final": val[-1][1], "curve": val,
            "wall_min": round((time.time() - t0) / 60, 2), "peak_rss_gb": max(peaks) if peaks else None,
            "commit": provenance(None, matmul=False)["commit"], "loadavg_after": os.getloadavg()}


def interval(diffs: list[float]) -> dict:
    """Mean of the paired differences and its 95 % t interval (None with fewer than 2 pairs)."""
    m = fmean(diffs)
    if len(diffs) < 2:
        return {"mean": round(m, 4), "ci95": None, "n": len(diffs)}
    half = T_975[len(diffs) - 1] * stdev(diffs) / len(diffs) ** 0.5
    return {"mean": round(m, 4), "ci95": [round(m - half, 4), round(m + half, 4)], "n": len(diffs)}


def summarize(runs: list[dict]) -> dict:
    out = {}
    for config in dict.fromkeys(r["config"] for r in runs):
        by = {(r["seed"], r["dtype"]): r for r in runs if r["config"] == config}
        seeds = sorted({s for s, d in by if all((s, x) in by for x in DTYPES)})
        if not seeds:
            continue
        pairs = [(by[(s, "bfloat16")], by[(s, "float32")]) for s in seeds]
        out[config] = {
            "seeds": seeds,
            "best_bf16_minus_fp32": interval([b["best"] - f["best"] for b, f in pairs]),
            "final_bf16_minus_fp32": interval([b["final"] - f["final"] for b, f in pairs]),
            "mean": {d: {k: round(fmean(by[(s, d)][k] for s in seeds), 4) for k in ("base", "best", "final", "wall_min")}
                     for d in DTYPES},
            "peak_rss_gb": {d: max((by[(s, d)]["peak_rss_gb"] or 0) for s in seeds) for d in DTYPES},
            "wall_ratio_bf16_over_fp32": round(fmean(b["wall_min"] for b, _ in pairs)
                                               / fmean(f["wall_min"] for _, f in pairs), 3),
        }
    return out


def save(doc: dict, path: Path, final: bool = False) -> None:
    """The result with its summary and provenance; the history line only for the final write."""
    doc["summary"] = summarize(doc["runs"])
    doc.pop("provenance", None)
    write_result(path, doc, model_dir=None,
                 history=None if final else Path(tempfile.gettempdir()) / "rolecall-precision-history")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", nargs="+", default=["single", "voting-sp"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--steps", nargs="+", type=int, default=[40, 20], help="per config, in --configs order")
    ap.add_argument("--runs", type=Path, default=Path("runs/real_precision"))
    ap.add_argument("--out", type=Path, default=RESULT)
    ap.add_argument("--summarize", action="store_true", help="only rebuild the summary of --out")
    args = ap.parse_args(argv)
    doc = json.loads(args.out.read_text()) if args.out.exists() else {"runs": []}
    if args.summarize:
        save(doc, args.out, final=True)
        print(json.dumps(doc["summary"], indent=1))
        return 0
    from rolecall.policies.model import resolve_model_dir

    doc["weights_sha256"] = provenance(resolve_model_dir("smollm2-135m"), matmul=False)["model_sha256"]
    doc["work"] = {"val_problems": 100, "val_every": 5, "early_stop": None, "order": "per seed: bf16 then fp32"}
    steps = dict(zip(args.configs, args.steps + args.steps[-1:] * len(args.configs)))
    for config in args.configs:
        for seed in args.seeds:
            for dtype in DTYPES:
                if any(r["config"] == config and r["seed"] == seed and r["dtype"] == dtype
                       and r["steps"] == steps[config] for r in doc["runs"]):
                    continue  # measured already (a resumed driver)
                out = args.runs / f"{config}-s{seed}-{dtype}-{time.strftime('%Y%m%d-%H%M%S')}"
                r = run_one(config, seed, dtype, steps[config], out)
                doc["runs"].append(r)
                save(doc, args.out)
                print(f"{config} seed {seed} {dtype}: base {r['base']:.2f} best {r['best']:.2f} "
                      f"final {r['final']:.2f} in {r['wall_min']:.1f} min, peak {r['peak_rss_gb']} GB", flush=True)
    save(doc, args.out, final=True)
    print(json.dumps(doc["summary"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
