"""Two training runs on one machine: does each get its share of the cores?

Three arms of the default `rolecall train` (voting on the embedded model, 8 steps, no
validation after step 0), median seconds per step over steps 3-8:
  - alone: one run;
  - pair, every run on all cores (`train.threads=<cores>`, what rolecall did before runs
    shared the machine): two runs started together;
  - pair, automatic threads (`train.threads=0`, the default): two runs started together.
A fair share is about twice the time alone (less where one run alone cannot fill the cores).

    python benchmarks/shared_machine.py          # ~5 minutes on 2 cores (the all-cores pair is that slow)
Writes benchmarks/results/shared_machine.json.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.provenance import write_result  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULT = HERE / "results" / "shared_machine.json"
STEPS = 8


def start(out: Path, extra: list[str]) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen([sys.executable, "-m", "rolecall", "train", "--steps", str(STEPS), "--out", str(out),
                             "train.val_every=1000", *extra], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def step_times(out: Path) -> dict:
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    steps = [r for r in rows if "time/step_s" in r]
    times = [r["time/step_s"] for r in steps]
    return {"median_s_per_step": round(median(times[2:]), 3), "s_per_step": [round(t, 3) for t in times],
            "threads": sorted({r["time/threads"] for r in steps if "time/threads" in r})}


def arm(tmp: Path, name: str, runs: int, extra: list[str]) -> list[dict]:
    procs = [start(tmp / f"{name}{i}", extra) for i in range(runs)]
    for p in procs:
        if p.wait() != 0:
            raise SystemExit(f"{name}: a run failed (exit {p.returncode})")
    return [step_times(tmp / f"{name}{i}") for i in range(runs)]


def main() -> int:
    cores = os.cpu_count() or 1
    tmp = Path(tempfile.mkdtemp(prefix="rc-shared-"))
    alone = arm(tmp, "alone", 1, [])[0]
    pinned = arm(tmp, "pinned", 2, [f"train.threads={cores}"])
    auto = arm(tmp, "auto", 2, [])
    slow = lambda runs: round(median(r["median_s_per_step"] for r in runs) / alone["median_s_per_step"], 2)  # noqa: E731
    result = {"date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {cores} cores",
              "run": f"rolecall train --steps {STEPS} (default voting run), median s/step of steps 3-{STEPS}",
              "alone": alone, "pair_all_cores_each": pinned, "pair_automatic_threads": auto,
              "slowdown_all_cores_each": slow(pinned), "slowdown_automatic_threads": slow(auto)}
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    write_result(RESULT, result)
    print(f"alone {alone['median_s_per_step']:.2f} s/step; two runs, all cores each: x{result['slowdown_all_cores_each']}"
          f" per step; two runs, automatic threads: x{result['slowdown_automatic_threads']}; wrote {RESULT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
