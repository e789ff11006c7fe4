"""The supervised warm start of search_answer's roles on SmolLM2-135M-Instruct.

    rolecall get-model smollm2-135m        # once
    python benchmarks/real_warm_start.py   # about 20 minutes on 2 cores

On this model search_answer's generator cannot answer from evidence before training (exact
match 0.00-0.03, `benchmarks/results/history/real_search_start.json`), so RL has no signal to climb.
This fits the adapters to the workflow's demonstrations (the searcher querying each support
passage's title in turn; the generator naming the gold answer from evidence that holds it) on
the built-in multi-hop task's tuning world (task seed 7: other invented names and questions
than the world a run trains and validates on), one pass over them, exactly as

    rolecall warm-start configs/real/smollm2-search_answer.yaml task.seed=7 --out runs/search_warm
    rolecall warm-start configs/real/smollm2-search_answer.yaml task.seed=7 routing=shared \
        "policies={shared: {}}" --out runs/search_warm_shared

do: once with a policy per role (where the full system and its ablation start) and once with
one policy for both roles (where the grid's one-policy control starts: the same
demonstrations, the same passes over each). Each reads its held-out tenth of the questions
before and after (the sampled reply, T = 0.7, against the demonstration's).

Writes the two folders and benchmarks/results/real_warm_start.json with provenance.
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


SETUPS = {"per_role": [], "shared": ["routing=shared", "policies={shared: {}}"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("runs/search_warm"),
                    help="the per-role warm start's folder; the shared one's is this name + _shared")
    ap.add_argument("--epochs", type=float, default=1.0)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--result", type=Path, default=RESULT)
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from rolecall.config import load_config
    from rolecall.policies.model import resolve_model_dir
    from rolecall.train.stack import build_stack
    from rolecall.train.warm_start import check_out, from_base, warm_start, write

    outs = {name: args.out if name == "per_role" else args.out.with_name(args.out.name + "_shared") for name in SETUPS}
    for out in outs.values():
        check_out(out)  # before any fitting
    doc: dict = {"loadavg_before": os.getloadavg()}
    for name, extra in SETUPS.items():
        out = outs[name]
        stack = build_stack(from_base(load_config(CONFIG, OVERRIDES + extra)))
        try:
            def say(policy: str, step: int, total: int, nll: float) -> None:
                if step % 10 == 0 or step == total:
                    print(f"{name} {policy} step {step}/{total} nll {nll:.3f} ({time.strftime('%H:%M:%S')})",
                          flush=True)

            record = warm_start(stack, epochs=args.epochs, batch=args.batch, lr=args.lr, seed=0, progress=say)
            record = write(stack, record, out, {"config": CONFIG, "overrides": OVERRIDES + extra})
        finally:
            stack.close()
        for policy, r in record["policies"].items():
            print(f"{name} {policy}: held out {r['held_out_before']} -> {r['held_out_after']}", flush=True)
        doc[name] = {**record, "folder": str(out)}
    doc["loadavg_after"] = os.getloadavg()
    write_result(args.result, doc, model_dir=resolve_model_dir("smollm2-135m"))
    print(f"wrote {args.result}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
