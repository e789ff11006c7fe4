"""Speed benchmarks 6 and 7 of `benchmarks/run.py`: how step time scales, and how much memory a run holds.

Scaling: seconds per training step of the default voting run as the group size grows
(4, 8, 16) and as the number of parallel generator slots grows (1, 3, 5 voters), next to
the tokens the step generated. Cost should grow no worse than linearly in generated
tokens: seconds per thousand generated tokens should not rise with the work.

Memory: peak resident set size of a whole `rolecall train` process (model loading,
step-0 validation, training steps, checkpoint), measured by the kernel
(`getrusage(RUSAGE_CHILDREN).ru_maxrss`) for the default run, and for orch_workers under
Isolated-Policy (3 adapters: orchestrator, worker, synthesizer) vs Shared-Policy (1).
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from statistics import median

import torch


def step_cost(overrides: list[str], steps: int = 3) -> dict:
    """Median s/step and generated tokens per step over `steps` steps after one warm-up step."""
    from rolecall.config import load_config
    from rolecall.train.stack import build_stack
    from rolecall.train.step import train_step

    stack = build_stack(load_config(None, ["train.threads=2", *overrides]))
    train_step(stack, 1)
    times, gen = [], []
    for step in range(2, 2 + steps):
        t0 = time.perf_counter()
        _, eps = train_step(stack, step)
        times.append(time.perf_counter() - t0)
        gen.append(sum(len(t.completion_ids) for e in eps for t in e.turns))
    stack.verifier.close()
    s, g = median(times), median(gen)
    return {"s_per_step": s, "generated_tokens_per_step": g, "s_per_kilo_generated_token": 1000 * s / g}


def scaling(steps: int = 3) -> dict:
    groups = {n: step_cost([f"rollout.group_size={n}"], steps) for n in (4, 8, 16)}
    slots = {n: step_cost([f"workflow.options={{n_voters: {n}}}"], steps) for n in (1, 3, 5)}

    def growth(table: dict) -> dict:
        # Cost per generated token at the largest setting over the smallest: <= 1 means
        # no worse than linear in generated tokens (batching makes it sub-linear).
        lo, hi = table[min(table)], table[max(table)]
        return {"token_ratio": hi["generated_tokens_per_step"] / lo["generated_tokens_per_step"],
                "time_ratio": hi["s_per_step"] / lo["s_per_step"],
                "cost_per_token_ratio": hi["s_per_kilo_generated_token"] / lo["s_per_kilo_generated_token"]}

    return {"steps_timed": steps, "group_size": groups, "group_size_growth": growth(groups),
            "parallel_slots": slots, "parallel_slots_growth": growth(slots)}


def _peak_rss_mb(args: list[str]) -> float:
    """Peak RSS of one `rolecall train` child process, in MiB."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    with tempfile.TemporaryDirectory() as out:
        # A fresh interpreter that only runs the child, so RUSAGE_CHILDREN is that child alone.
        code = ("import resource, subprocess, sys; "
                "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True); "
                "sys.exit(r.stderr[-2000:]) if r.returncode else "
                "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
        cmd = [sys.executable, "-c", code, sys.executable, "-m", "rolecall", "train", *args, "--out", f"{out}/run"]
        res = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    return int(res.stdout.strip().splitlines()[-1]) / 1024  # ru_maxrss is in KiB on Linux


def memory(steps: int = 2) -> dict:
    common = ["--steps", str(steps), "train.threads=2"]
    ow = ["configs/examples/orch_workers.yaml", "task.n_val=16"]
    default = _peak_rss_mb(common)
    ip = _peak_rss_mb([*ow, "routing=isolated", *common])
    sp = _peak_rss_mb([*ow, "routing=shared", *common])
    return {"steps": steps, "default_run_peak_rss_mb": default, "orch_workers_ip_3_adapters_peak_rss_mb": ip,
            "orch_workers_sp_peak_rss_mb": sp, "ip_over_sp": ip / sp}


if __name__ == "__main__":
    import json

    torch.set_num_threads(2)
    print(json.dumps({"scaling": scaling(), "memory": memory()}, indent=2))
