"""Does the embedded model's shape learn to read names off the page, and how fast?

Trains the embedded model's architecture from scratch on `make-base`'s name-copying phase
alone (`copy_steps`: half copy drills, half name facts on small worlds drawn afresh) and,
every `--every` steps, measures exact greedy copies on held-out name facts of each kind:
the name in the question (the searcher's first query), the bridge its passage leads to
(the second query) and the answer its two passages give among two distractors. This sizes
`make-base --copy-steps`; the search roles' learning benchmark is `search_answer.py`.

    python benchmarks/name_copy.py                  # 1,800 steps, about 33 minutes on 2 cores
    python benchmarks/name_copy.py --steps 600 --every 150

Writes benchmarks/results/name_copy.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
from rolecall.basemodel.make import build_model, copy_steps, name_fact, train_step  # noqa: E402
from rolecall.basemodel.tokenizer import build_tokenizer  # noqa: E402

RESULT = Path(__file__).resolve().parent / "results" / "name_copy.json"
KINDS = ("question", "bridge", "answer")


def exact_copies(model, tok, n: int = 120, seed: int = 12345) -> dict[str, float]:
    """Share of held-out name facts of each kind the model completes exactly (greedy)."""
    rng = random.Random(seed)
    hit, seen = dict.fromkeys(KINDS, 0), dict.fromkeys(KINDS, 0)
    model.eval()
    with torch.no_grad():
        for _ in range(n):
            ids, mask = name_fact(rng, tok)
            k = mask.index(1)
            prompt = tok.decode(ids[:k])
            kind = "question" if prompt.startswith("In ") else "answer" if prompt.endswith("Answer: ") else "bridge"
            out = model.generate(torch.tensor([ids[:k]]), max_new_tokens=12, do_sample=False,
                                 pad_token_id=tok.pad_token_id)
            said = tok.decode(out[0, k:], skip_special_tokens=True).split("\n")[0].strip()
            seen[kind] += 1
            hit[kind] += said == tok.decode(ids[k:]).strip()
    model.train()
    return {kind: round(hit[kind] / seen[kind], 3) for kind in KINDS}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1800)
    ap.add_argument("--every", type=int, default=300)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--rows", type=int, default=16, help="rows a step (make-base's fact_batch)")
    a = ap.parse_args()
    if a.steps < 1 or a.every < 1:
        ap.error("--steps and --every must be at least 1")
    torch.set_num_threads(os.cpu_count() or 1)
    tok = build_tokenizer()
    model = build_model(tok, 0)
    plan = copy_steps(a.steps, a.rows, tok, 17)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01, betas=(0.9, 0.98))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 30))  # make-base's warmup
    model.train()
    t0, curve = time.time(), []
    for step, rows in enumerate(plan, 1):
        loss = train_step(model, opt, sched, rows, tok.pad_token_id)
        if step % a.every == 0 or step == a.steps:
            point = {"step": step, "loss": round(loss.item(), 4), "elapsed_s": round(time.time() - t0, 1),
                     **exact_copies(model, tok)}
            curve.append(point)
            print(json.dumps(point), flush=True)
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps({
        "date": time.strftime("%Y-%m-%d"), "steps": a.steps, "rows": a.rows, "lr": a.lr,
        "machine": {"cpus": os.cpu_count(), "threads": torch.get_num_threads(), "python": platform.python_version(),
                    "torch": torch.__version__},
        "curve": curve}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
