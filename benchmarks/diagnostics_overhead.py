"""What full role-level diagnostics cost on the default run (goal: at most +10 % step time).

One trainer stack per routing (the default voting workflow, 8 problems x 8 samples, embedded
model). Steps alternate between `train.diagnostics=full` (every role-level metric, kl_ref's
extra base forward, SP grad shares, alarms) and `basic` (the loss-side metrics the trainer
needs anyway), so both modes see the same weights' neighbourhood and the same machine load;
the overhead is the ratio of mean step times. The pure-Python trajectory signatures and the
alarm monitor are also timed on their own.

    python benchmarks/diagnostics_overhead.py            # ~6 minutes on 2 cores
"""
from __future__ import annotations

import argparse
import platform
import sys
import time
from datetime import date
from pathlib import Path
from statistics import fmean

import torch

from rolecall.config import load_config
from rolecall.diagnostics.trajectory import role_signatures
from rolecall.train.session import build_monitor
from rolecall.train.stack import build_stack
from rolecall.train.step import train_step

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.provenance import write_result  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "diagnostics_overhead.json"


def measure(routing: str, pairs: int) -> dict:
    cfg = load_config(None, [f"routing={routing}"])
    stack = build_stack(cfg)
    monitor = build_monitor(cfg, stack.routing)
    train_step(stack, 1)  # warm-up: first-call allocations, lazy imports
    times: dict[str, list[float]] = {"full": [], "basic": []}
    sig_s, alarm_s = [], []
    step = 2
    for i in range(2 * pairs):
        # ABBA order cancels a slow drift in step time (lengths change as the model trains).
        mode = "full" if i % 4 in (0, 3) else "basic"
        stack.cfg.train.diagnostics = mode
        t0 = time.perf_counter()
        row, episodes = train_step(stack, step)
        if mode == "full":
            t1 = time.perf_counter()
            monitor.observe(row)
            alarm_s.append(time.perf_counter() - t1)
        times[mode].append(time.perf_counter() - t0)
        t2 = time.perf_counter()
        role_signatures(episodes)
        sig_s.append(time.perf_counter() - t2)
        step += 1
    full, basic = fmean(times["full"]), fmean(times["basic"])
    return {"routing": routing, "pairs": pairs, "step_s_full": round(full, 3), "step_s_basic": round(basic, 3),
            "overhead_frac": round(full / basic - 1, 4), "signatures_s": round(fmean(sig_s), 4),
            "alarms_s": round(fmean(alarm_s), 6), "step_times": {k: [round(x, 3) for x in v] for k, v in times.items()}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=12, help="full/basic step pairs per routing")
    args = ap.parse_args()
    torch.set_num_threads(2)
    results = [measure(r, args.pairs) for r in ("isolated", "shared")]
    doc = {"date": str(date.today()), "machine": f"{platform.machine()}, {torch.get_num_threads()} threads, "
                                                 f"torch {torch.__version__}, no GPU",
           "goal": "full diagnostics add <= 10 % to the step time of the default run",
           "results": results,
           "goal_met": all(r["overhead_frac"] <= 0.10 for r in results)}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    write_result(OUT, doc)
    for r in results:
        print(f"{r['routing']:>8}: full {r['step_s_full']:.2f} s/step, basic {r['step_s_basic']:.2f} s/step, "
              f"overhead {100 * r['overhead_frac']:+.1f} %  (signatures {1000 * r['signatures_s']:.0f} ms)")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
