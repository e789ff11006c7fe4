"""The fused LoRA node against separate modules: the same training update with the LoRA router's
fused frozen-linear-plus-adapter node switched on and off, the two arms alternating in one process.

    python -m benchmarks.fused_lora          # ~15 minutes on 2 cores

Writes benchmarks/results/fused_lora.json. Three updates, each `update_policies` as a training
step runs it, one on-policy mini-batch, no diagnostics:

- compute, one adapter: the 28 M-parameter model of `benchmarks/compute.py`, an aggregator's
  batch of 4 prompts of 800 tokens x 8 samples of 256-token completions, LoRA r 16;
- compute, two adapters: 6 prompts x 2 samples on the same model, the prompts dealt over two
  adapters, so every layer runs the row-masked mix of both;
- embedded: the 1.6 M-parameter embedded default model, 8 prompts of 120 tokens x 8 samples of
  48 tokens, 1 thread (where per-call overhead, not matmuls, dominates).

"Separate" is what the router did before the node existed: PEFT's frozen `base(x)` plus the
adapter's term as separate autograd nodes. The arms run alternately (A B, B A, ...) after a
warm-up of each, so the machine's drift falls on both; the figures are medians, and the
ratio's median over the adjacent pairs.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

import torch

import rolecall.policies.lora_router as router_module
from benchmarks.compute import positive_int, stack_update, update_setup
from benchmarks.compute_model import Shape, make_model
from benchmarks.provenance import write_result

HERE = Path(__file__).resolve().parent
FUSED = router_module.fusable


def alternate(run, pairs: int) -> dict:
    """`pairs` timings of each arm, alternating, after one warm-up of each."""
    times: dict[str, list[float]] = {"fused": [], "separate": []}
    arms = {"fused": FUSED, "separate": lambda *a: False}
    try:
        for arm in arms.values():
            router_module.fusable = arm
            run()
        for i in range(pairs):
            for name in (("fused", "separate") if i % 2 == 0 else ("separate", "fused")):
                router_module.fusable = arms[name]
                t0 = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - t0)
    finally:
        router_module.fusable = FUSED
    ratios = [f / s for f, s in zip(times["fused"], times["separate"])]
    return {"pairs": pairs, "fused_s": round(median(times["fused"]), 3), "separate_s": round(median(times["separate"]), 3),
            # below 1: the fused node is faster
            "fused_over_separate": round(median(ratios), 3),
            "fused_s_each": [round(t, 3) for t in times["fused"]],
            "separate_s_each": [round(t, 3) for t in times["separate"]]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE / "results" / "fused_lora.json")
    ap.add_argument("--pairs", type=positive_int, default=5, help="alternating pairs on the compute model")
    ap.add_argument("--embedded-pairs", type=positive_int, default=20, help="alternating pairs on the embedded model")
    args = ap.parse_args(argv)
    t_start = time.time()
    shape = Shape()
    doc: dict = {"date": time.strftime("%Y-%m-%d"), "torch": torch.__version__}
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory(prefix="rc-fused-") as tmp:
        model_dir = make_model(Path(tmp) / "model", shape)
        for key, policies, prompts, samples in (("compute_one_adapter", 1, 4, 8), ("compute_two_adapters", 2, 6, 2)):
            run, rows, _ = update_setup(model_dir, shape, 256, policies, prompts, samples)
            doc[key] = {"rows": len(rows), "prompt_tokens": 800, "completion_tokens": 256, "threads": 2,
                        **alternate(run, args.pairs)}
            print(f"{key}: {doc[key]}", flush=True)
    torch.set_num_threads(1)
    # the embedded default model
    run, stack = stack_update({"train": {"threads": 1}}, 8, 8, 120, 48)
    try:
        doc["embedded"] = {"rows": 64, "prompt_tokens": 120, "completion_tokens": 48, "threads": 1,
                           **alternate(run, args.embedded_pairs)}
    finally:
        stack.close()
    print(f"embedded: {doc['embedded']}", flush=True)
    doc["wall_s"] = round(time.time() - t_start, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_result(args.out, doc, model_dir=None)  # built here, then deleted
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
