"""A real-tier training step in float32 and in bfloat16, side by side in one process.

    rolecall get-model smollm2-135m                 # once
    python -m benchmarks real_precision_speed       # ~10 minutes on 2 cores

`--arms float32,auto` times the default (`model.dtype: auto`) against float32 instead, and
`--config embedded` the embedded default run's config (what a first `rolecall train` runs);
each arm's resolved dtype and the reason `auto` gave are recorded.

The work is the real tier's single-agent config (`configs/real/smollm2-single.yaml`) at
8 problems x 8 samples, 48 new tokens, `ignore_eos` (every completion runs to its budget, so
both arms do identical work). Two stacks are built, one per dtype (`model.dtype`), and their
training steps alternate over `--rounds` rounds, so a drift in the machine's speed hits both
arms alike; each step's rollout and update times are kept, after one untimed step per arm. The matmul rate in each dtype is
measured in the same run (at SmolLM2's MLP shape), with the load average, because the peak
drifts from day to day.

Also recorded per arm: the token-level chi-square between the engine's sampling log-probs and
the trainer's recomputed ones (`role/generator/chi2_token`, and at the first mini-batch `..._mb0`), the mismatch a lower precision adds.

Writes benchmarks/results/real_precision_speed.json with provenance.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from statistics import median

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.provenance import write_result  # noqa: E402  (after the path fix above)

RESULT = Path(__file__).resolve().parent / "results" / "real_precision_speed.json"
ARMS = ("float32", "bfloat16")  # the default pair; --arms names another


def matmul_rate(dtype: torch.dtype, n: int = 512, k: int = 576, m: int = 1536, repeats: int = 5) -> float:
    """GFLOP/s of an n x k @ k x m product in `dtype` (best of `repeats`, after a warm-up)."""
    a, b = torch.randn(n, k, dtype=dtype), torch.randn(k, m, dtype=dtype)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t)
    return 2 * n * k * m / best / 1e9


def build(dtype: str, args):
    from rolecall.config import load_config
    from rolecall.train.stack import build_stack

    overrides = [f"model.dtype={dtype}", f"rollout.problems_per_step={args.prompts}",
                 f"rollout.group_size={args.samples}", f"rollout.max_new_tokens={args.tokens}",
                 "rollout.ignore_eos=true", f"train.threads={args.threads}", "task.n_val=8",
                 f"train.steps={args.rounds + 2}"]
    return build_stack(load_config(None if args.config == "embedded" else args.config, overrides))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/real/smollm2-single.yaml")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--arms", default=",".join(ARMS), help="two model.dtype values, comma-separated")
    ap.add_argument("--out", type=Path, default=RESULT)
    args = ap.parse_args(argv)
    arms = tuple(args.arms.split(","))
    if len(arms) != 2 or len(set(arms)) != 2:
        ap.error(f"--arms takes two different model.dtype values, got {args.arms!r}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(args.threads)
    from rolecall.policies.model import resolve_model_dir
    from rolecall.policies.precision import auto_dtype  # what `auto` resolves to, said in the record
    from rolecall.train.step import train_step

    stacks = {arm: build(arm, args) for arm in arms}
    model_dir = resolve_model_dir(stacks[arms[0]].cfg.model.path)
    resolved = {arm: auto_dtype(torch.device("cpu"), model_dir) if arm == "auto" else None for arm in arms}
    dtypes = {arm: resolved[arm].dtype if resolved[arm] else getattr(torch, arm) for arm in arms}
    steps: dict[str, list[dict]] = {arm: [] for arm in arms}
    rates: dict[str, list[float]] = {arm: [] for arm in arms}
    for arm in arms:  # one untimed step each: first calls pick kernels and fill caches
        train_step(stacks[arm], 1)
    for r in range(1, args.rounds + 1):
        for arm in (arms if r % 2 else arms[::-1]):  # alternate which arm goes first
            rates[arm].append(matmul_rate(dtypes[arm]))
            row, _ = train_step(stacks[arm], r + 1)
            steps[arm].append({"step_s": round(row["time/step_s"], 2), "rollout_s": round(row["time/rollout_s"], 2),
                               "update_s": round(row["time/step_s"] - row["time/rollout_s"], 2),
                               "chi2_token": row.get("role/generator/chi2_token"),
                               "chi2_token_first_mini_batch": row.get("role/generator/chi2_token_mb0"),
                               "reward": row.get("reward/mean")})
            print(f"round {r} {arm:<8} step {steps[arm][-1]['step_s']:.1f} s "
                  f"(rollout {steps[arm][-1]['rollout_s']:.1f}, update {steps[arm][-1]['update_s']:.1f}) "
                  f"chi2 {steps[arm][-1]['chi2_token']}", flush=True)
    for s in stacks.values():
        s.close()
    med = {arm: {k: round(median(x[k] for x in steps[arm]), 2) for k in ("step_s", "rollout_s", "update_s")}
           for arm in arms}
    ratio = {k: round(med[arms[1]][k] / med[arms[0]][k], 3) for k in med[arms[0]]}
    doc = {"work": {"config": args.config, "prompts": args.prompts, "samples": args.samples,
                    "max_new_tokens": args.tokens, "ignore_eos": True, "threads": args.threads, "rounds": args.rounds},
           "arms": list(arms), "steps": steps, "median": med,
           "dtype": {arm: str(dtypes[arm]).removeprefix("torch.") for arm in arms},
           "auto_why": next((r.why for r in resolved.values() if r), None),
           f"ratio_{_short(arms[1])}_over_{_short(arms[0])}": ratio,
           "matmul_gflops": {arm: [round(x, 1) for x in rates[arm]] for arm in arms},
           "loadavg": os.getloadavg()}
    write_result(args.out, doc, model_dir=model_dir)
    print(f"{arms[1]} / {arms[0]} step time: {ratio['step_s']}; wrote {args.out}")
    return 0


def _short(dtype: str) -> str:
    return {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}.get(dtype, dtype)


if __name__ == "__main__":
    raise SystemExit(main())
