"""Data-parallel training over gloo on this machine: 2 processes (1 thread each) vs 1 process
(2 threads), the default voting run on the embedded model, per-request seeds so both arms play
the same episodes. Each rank plays half of each step's problems and runs half of each
mini-batch's micro-batches; the figures are the rollout, the update (step minus rollout) and
the whole step.

    python benchmarks/data_parallel.py            # 4 timed steps after 1 warm-up, per arm
Writes benchmarks/results/data_parallel.json.
"""
from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.provenance import write_result  # noqa: E402
os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
RESULT = HERE / "results" / "data_parallel.json"
STEPS = 5


def arm(rank: int, world: int, init_file: str, threads: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(threads)
    if world > 1:
        dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        import rolecall
        from rolecall.train.stack import build_stack
        from rolecall.train.step import train_step

        stack = build_stack(rolecall.make_config("examples/voting", {"rollout.request_seeds": True,
                                                                     "train.threads": threads}))
        rows = []
        try:
            for step in range(1, STEPS + 1):
                row, _ = train_step(stack, step)
                rows.append({"step_s": row["time/step_s"], "rollout_s": row["time/rollout_s"]})
        finally:
            stack.close()
        if rank == 0:
            Path(out).write_text(json.dumps(rows))
    finally:
        if world > 1:
            dist.destroy_process_group()


def summarize(rows: list[dict]) -> dict:
    timed = rows[1:]  # the first step warms up
    step = median(r["step_s"] for r in timed)
    update = median(r["step_s"] - r["rollout_s"] for r in timed)
    roll = median(r["rollout_s"] for r in timed)
    return {"step_s": round(step, 3), "rollout_s": round(roll, 3), "update_s": round(update, 3), "rows": rows}


def main() -> int:
    import torch.multiprocessing as mp

    tmp = tempfile.mkdtemp(prefix="rc-dp-")
    arm(0, 1, "", 2, f"{tmp}/one.json")
    mp.spawn(arm, args=(2, f"{tmp}/init", 1, f"{tmp}/two.json"), nprocs=2, join=True)
    one = summarize(json.loads(Path(f"{tmp}/one.json").read_text()))
    two = summarize(json.loads(Path(f"{tmp}/two.json").read_text()))
    result = {"config": "configs/examples/voting.yaml + rollout.request_seeds=true", "machine":
              f"{platform.machine()}, {os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d"),
              "one_process_2_threads": one, "two_processes_gloo_1_thread_each": two,
              "rollout_ratio": round(two["rollout_s"] / one["rollout_s"], 3),
              "update_ratio": round(two["update_s"] / one["update_s"], 3),
              "step_ratio": round(two["step_s"] / one["step_s"], 3)}
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    write_result(RESULT, result)
    print(f"1 process: {one['step_s']:.2f} s/step (rollout {one['rollout_s']:.2f} s, update {one['update_s']:.2f} s); "
          f"2 gloo processes: {two['step_s']:.2f} s/step (rollout {two['rollout_s']:.2f} s, update "
          f"{two['update_s']:.2f} s): step x{result['step_ratio']:.2f}; wrote {RESULT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
