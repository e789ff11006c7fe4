"""Does a fixed 4 MB mmap threshold (`rolecall.train.memory.bound_heap`) cost a real-tier step time?

    rolecall get-model smollm2-135m          # once
    python benchmarks/heap_threshold.py      # ~8 minutes on 2 cores

One stack (the real tier's single-agent config at 8 problems x 8 samples, 48 new tokens,
`ignore_eos`, bf16 where the CPU has it) trains step after step while glibc's mmap threshold
alternates between rolecall's 4 MB and 32 MB, glibc's own ceiling (a fixed value: the default's
dynamic threshold cannot be restored in a running process, and it climbs to 32 MB anyway after
the first large frees). Each round runs both arms in turn, the order flipping every round, so a
load or a drift hits both; the ratio is 4 MB over 32 MB within each round, and its median over
the rounds (the ratio of the medians over all steps is kept too). The peak
resident memory of each arm is not comparable here (one process): real_memory.py measures it.

Writes benchmarks/results/heap_threshold.json with provenance and the load average.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.provenance import write_result  # noqa: E402  (after the path fix above)

RESULT = Path(__file__).resolve().parent / "results" / "heap_threshold.json"
ARMS = {"4MB": 4 << 20, "32MB": 32 << 20}


def per_round(times: dict[str, list[float]], steps: int) -> list[float]:
    """4 MB over 32 MB within each round (mean step of each arm): a drift across rounds, which
    the medians over all steps mix into the ratio, cancels here."""
    four, big = times["4MB"], times["32MB"]
    return [round((sum(four[i:i + steps]) / steps) / (sum(big[i:i + steps]) / steps), 3)
            for i in range(0, min(len(four), len(big)), steps)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(Path(__file__).resolve().parent.parent / "configs" / "real" / "smollm2-single.yaml"))
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=2, help="steps per arm per round")
    ap.add_argument("--out", type=Path, default=RESULT)
    args = ap.parse_args(argv)
    from rolecall.config import load_config
    from rolecall.train import memory
    from rolecall.train.stack import build_stack
    from rolecall.train.step import train_step

    if not memory.set_mmap_threshold(memory.HEAP_MMAP_BYTES):
        print("no glibc mallopt here: nothing to compare")
        return 1
    overrides = ["rollout.problems_per_step=8", "rollout.group_size=8", "rollout.max_new_tokens=48",
                 "rollout.ignore_eos=true", "train.threads=2", "task.n_val=8", "model.dtype=auto"]
    stack = build_stack(load_config(args.config, overrides))
    times: dict[str, list[float]] = {a: [] for a in ARMS}
    load = [os.getloadavg()[0]]
    step = 0
    train_step(stack, (step := step + 1))  # warm-up, untimed
    for r in range(args.rounds):
        for arm in (list(ARMS) if r % 2 == 0 else list(ARMS)[::-1]):
            memory.set_mmap_threshold(ARMS[arm])
            for _ in range(args.steps):
                t = time.perf_counter()
                train_step(stack, (step := step + 1))
                times[arm].append(round(time.perf_counter() - t, 3))
            print(f"round {r + 1} {arm}: {times[arm][-args.steps:]}", flush=True)
        load.append(os.getloadavg()[0])
    stack.verifier.close()
    med = {a: median(v) for a, v in times.items()}
    rounds = per_round(times, args.steps)
    doc = {"ratio_per_round": rounds, "work": {"config": "configs/real/smollm2-single.yaml", "prompts": 8, "samples": 8, "max_new_tokens": 48,
                    "ignore_eos": True, "dtype": str(stack.model.dtype).replace("torch.", ""), "rounds": args.rounds,
                    "steps_per_arm_per_round": args.steps},
           "step_s": times, "median_step_s": med, "ratio_4mb_over_32mb": round(med["4MB"] / med["32MB"], 3),
           "ratio_median_of_rounds": round(median(rounds), 3),
           "loadavg": [round(x, 2) for x in load]}
    write_result(args.out, doc, model_dir=None)
    print(f"median step: {med}; 4 MB / 32 MB per round {doc['ratio_per_round']}, median {doc['ratio_median_of_rounds']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
