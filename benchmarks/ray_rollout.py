"""Rollout throughput on Ray actors vs in-process, at equal work.

The default voting run's rollout (embedded model, 8 problems x 8 samples, per-request seeds
so every arm plays the very same episodes) timed in-process and on 1 and 2 local Ray CPU
actors, after one warm-up rollout each. The adapters are published before every rollout, as
in training, and that time is included.

    python benchmarks/ray_rollout.py             # 3 timed rollouts per arm
Writes benchmarks/results/ray_rollout.json.
"""
from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.provenance import write_result  # noqa: E402
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

HERE = Path(__file__).resolve().parent
RESULT = HERE / "results" / "ray_rollout.json"


def time_arm(workers: int, repeats: int) -> dict:
    import rolecall
    from rolecall.train.stack import build_stack
    from rolecall.train.step import roll_out, problems_for_step

    cfg = rolecall.make_config("examples/voting", {"rollout.request_seeds": True, "rollout.actors": workers})
    t0 = time.time()
    stack = build_stack(cfg)
    start_s = time.time() - t0
    try:
        problems = problems_for_step(stack.train_P, cfg.rollout.problems_per_step, 0, 1)
        roll_out(stack, problems, cfg.rollout.group_size, stack.routing.routes, seed=1, training=True)  # warm-up
        times, tokens = [], 0
        for r in range(repeats):
            t0 = time.time()
            eps = roll_out(stack, problems, cfg.rollout.group_size, stack.routing.routes, seed=2 + r, training=True)
            times.append(time.time() - t0)
            tokens = sum(len(t.completion_ids) for ep in eps for t in ep.turns)
    finally:
        stack.close()
    s = median(times)
    return {"workers": workers, "start_s": round(start_s, 2), "rollout_s": [round(t, 3) for t in times],
            "median_s": round(s, 3), "episodes": len(eps), "completion_tokens_last": tokens,
            "episodes_per_s": round(len(eps) / s, 2)}


def main() -> int:
    arms = [time_arm(w, 3) for w in (0, 1, 2)]
    base = arms[0]["median_s"]
    for a in arms:
        a["vs_in_process"] = round(a["median_s"] / base, 3)
        print(f"workers {a['workers']}: {a['median_s']:.2f} s per rollout ({a['episodes_per_s']} episodes/s), "
              f"{a['vs_in_process']:.2f}x in-process time; start {a['start_s']:.1f} s")
    result = {"config": "configs/examples/voting.yaml + rollout.request_seeds=true", "machine":
              f"{platform.machine()}, {os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d"), "arms": arms}
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    write_result(RESULT, result)
    print(f"wrote {RESULT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
