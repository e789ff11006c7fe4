"""The supervised warm start of search_answer's generator on SmolLM2-135M-Instruct.

    rolecall get-model smollm2-135m        # once
    python benchmarks/real_warm_start.py --out runs/search_warm

On this model search_answer's generator cannot answer from evidence before training (exact
match 0.00-0.03, `benchmarks/results/real_search_start.json`), so RL has no signal to climb.
This fits the generator's adapter to the workflow's demonstrations (the generator naming the
gold answer from evidence that holds it, the hard-positive setting) on the built-in multi-hop
task's tuning world (task seed 7: other invented names and questions than the world a run
trains and validates on), exactly as

    rolecall warm-start configs/real/smollm2-search_answer.yaml task.seed=7 --out runs/search_warm

does, and reads the held-out tenth of the demonstrations before and after (the generator's
sampled reply, T = 0.7, against the gold answer). The runs of
`configs/grids/real_search_answer.yaml` start from `runs/search_warm/generator`.

Writes the adapter folder (--out) and benchmarks/results/real_warm_start.json with provenance.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.provenance import write_result  # noqa: E402  (after the path fix above)

RESULT = Path(__file__).resolve().parent / "results" / "real_warm_start.json"
CONFIG = "configs/real/smollm2-search_answer.yaml"
OVERRIDES = ["task.seed=7"]  # the tuning world


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("runs/search_warm"), help="the warm start's folder")
    ap.add_argument("--steps", type=int, default=80, help="about one pass over the tuning world's demonstrations")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--result", type=Path, default=RESULT)
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from rolecall.config import load_config
    from rolecall.policies.model import resolve_model_dir
    from rolecall.train.stack import build_stack
    from rolecall.train.warm_start import warm_start, write

    load0 = os.getloadavg()
    stack = build_stack(load_config(CONFIG, OVERRIDES))
    try:
        def say(policy: str, step: int, total: int, nll: float) -> None:
            if step % 10 == 0 or step == total:
                print(f"{policy} step {step}/{total} nll {nll:.3f} ({time.strftime('%H:%M:%S')})", flush=True)

        record = warm_start(stack, steps=args.steps, batch=args.batch, lr=args.lr, seed=0, progress=say)
        record = write(stack, record, args.out, {"config": CONFIG, "overrides": OVERRIDES})
    finally:
        stack.close()
    for policy, r in record["policies"].items():
        print(f"{policy}: held out {r['held_out_before']} -> {r['held_out_after']}", flush=True)
    doc = dict(record)
    doc.update(adapter_folder=str(args.out), loadavg_before=load0, loadavg_after=os.getloadavg())
    write_result(args.result, doc, model_dir=resolve_model_dir("smollm2-135m"))
    print(f"wrote {args.result} and {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
