"""Peak resident memory of real-tier runs, as a user starts them.

    rolecall get-model smollm2-135m          # once
    python benchmarks/real_memory.py         # ~30 minutes on 2 cores

Each cell is `rolecall train` on a shipped real config (`configs/real/`) in its own process,
for a few steps with its step-0 and last validation, with the config's own settings except
the ones the cell names: the single-agent control at 8 problems x 8 samples (the real tier's
speed work), and voting with one LoRA per role (IP, the config that was killed at ~11 GB by
the kernel's OOM killer) on chain_sum, on basic_arithmetic (that user's task) and on
leg_counting, whose questions are 2.4x longer prompts (64 tokens on average, up to 83, against
chain_sum's 27; voting's aggregator reads them with three answers). gsm_symbolic's word
problems, longer still, cannot be used: reasoning-gym puts a Fraction in their entries, which
rolecall refuses as not JSON data. The peak is the child process's own
(`ru_maxrss` from `wait4`), so it counts everything the run ever held, validation and
checkpoints included; beside it, the peak of the trainer and its reward worker processes
together, sampled twice a second; the run's `mem/peak_gb` rows and the micro-batch budget `auto` chose
are kept beside it.

Writes benchmarks/results/real_memory.json with provenance. Memory, unlike time, does not
depend on what else the machine runs; the load average is recorded all the same.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.provenance import write_result  # noqa: E402  (after the path fix above)

HERE = Path(__file__).resolve().parent
RESULT = HERE / "results" / "real_memory.json"
CHAIN = ["task.gym=chain_sum"]
ARITHMETIC = ["task.gym=basic_arithmetic",
              "task.gym_options={min_terms: 2, max_terms: 2, min_digits: 1, max_digits: 1}"]
LEGS = ["task.gym=leg_counting", "task.gym_options={}"]
WIDE = ["rollout.problems_per_step=8", "rollout.group_size=8"]
CELLS = {  # name: (config, overrides, the acceptance bound in GB)
    "single 8x8 chain_sum": ("single", WIDE + CHAIN, 2.5),
    "single 8x8 leg_counting": ("single", WIDE + LEGS, 2.5),
    "voting-ip chain_sum": ("voting-ip", CHAIN, 4.0),
    "voting-ip basic_arithmetic": ("voting-ip", ARITHMETIC, 4.0),
    "voting-ip leg_counting": ("voting-ip", LEGS, 4.0),
}


def tree_rss(pid: int) -> int:
    """Resident bytes of `pid` and every process below it (its reward workers), from /proc."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
                children.setdefault(int(fields[1]), []).append(int(d.name))
            except (OSError, IndexError, ValueError):
                continue
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo += children.get(p, [])
        try:
            total += int((Path(f"/proc/{p}/statm").read_text().split()[1])) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            continue
    return total


def run_cell(config: str, overrides: list[str], dtype: str, steps: int, out: Path) -> dict:
    """Train one cell in a child process; its peak RSS (wait4) and what its metrics say."""
    cmd = [sys.executable, "-m", "rolecall", "train", str(HERE.parent / "configs" / "real" / f"smollm2-{config}.yaml"),
           f"model.dtype={dtype}", f"train.steps={steps}", f"train.val_every={steps}", "train.stop_below_peak=null",
           *overrides, "--out", str(out)]
    t0 = time.time()
    proc = subprocess.Popen(cmd, env={**os.environ, "HF_HUB_OFFLINE": "1"}, cwd=HERE.parent,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    previous = signal.signal(signal.SIGTERM, lambda *a: proc.terminate())
    tree = [0]  # the trainer and its reward workers together, sampled twice a second

    def watch() -> None:
        while proc.poll() is None:
            tree[0] = max(tree[0], tree_rss(proc.pid))
            time.sleep(0.5)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        signal.signal(signal.SIGTERM, previous)
    err = proc.stderr.read()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{err[-3000:]}")
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    steps_rows = [r for r in rows if "mem/peak_gb" in r]
    budget = next((r["mem/micro_batch_tokens"] for r in steps_rows if "mem/micro_batch_tokens" in r),
                  next((r.get("tokens") for r in rows if r.get("event") == "micro_batch_tokens"), None))
    return {"peak_rss_gb": round(usage.ru_maxrss * 1024 / 1e9, 3), "peak_with_workers_gb": round(tree[0] / 1e9, 3),
            "metrics_peak_gb": max((r["mem/peak_gb"] for r in steps_rows), default=None),
            "rss_after_each_step_gb": [r.get("mem/rss_gb") for r in steps_rows],
            "micro_batch_tokens": budget, "minutes": round((time.time() - t0) / 60, 2),
            "prompt_tokens_step1": {k.split("/")[1]: round(v, 1) for k, v in (steps_rows[0] if steps_rows else {}).items()
                                    if k.startswith("role/") and k.endswith("/prompt_tokens") and v is not None},
            "loadavg_after": os.getloadavg()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", nargs="+", default=list(CELLS), choices=list(CELLS))
    ap.add_argument("--dtypes", nargs="+", default=["bfloat16", "float32"])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULT)
    args = ap.parse_args(argv)
    from rolecall.policies.model import resolve_model_dir

    doc = {"work": {"steps": args.steps, "validation": "step 0 and the last step, 100 problems"}, "cells": []}
    with tempfile.TemporaryDirectory(prefix="rolecall-memory-") as tmp:
        for dtype in args.dtypes:
            for name in args.cells:
                config, overrides, bound = CELLS[name]
                r = run_cell(config, overrides, dtype, args.steps, Path(tmp) / f"{len(doc['cells'])}")
                doc["cells"].append({"cell": name, "config": f"configs/real/smollm2-{config}.yaml",
                                     "overrides": overrides, "dtype": dtype, "bound_gb": bound,
                                     "within": r["peak_rss_gb"] <= bound, **r})
                print(f"{dtype:<8} {name:<28} peak {r['peak_rss_gb']:.2f} GB (bound {bound}) "
                      f"micro-batch {r['micro_batch_tokens']} in {r['minutes']:.1f} min", flush=True)
                # written after every cell, so a stopped driver keeps what it measured
                write_result(args.out, doc, model_dir=resolve_model_dir("smollm2-135m"),
                             history=Path(tmp) / "history")
    write_result(args.out, doc, model_dir=resolve_model_dir("smollm2-135m"))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
