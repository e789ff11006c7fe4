"""Does the embedded model's shape learn to read names off the page, and how fast?

Trains the embedded model's architecture from scratch on `make-base`'s name-copying phase
alone (`copy_steps`: half copy drills, half name facts on small worlds drawn afresh) and,
every `--every` steps, measures exact greedy copies on held-out name facts of each kind:
the name in the question (the searcher's first query), the bridge its passage leads to
(the second query) and the answer its two passages give among two distractors. This sizes
`make-base --copy-steps`; the search roles' learning benchmark is `search_answer.py`.

    python benchmarks/name_copy.py                  # 1,800 steps, about 33 minutes on 2 cores
    python benchmarks/name_copy.py --steps 600 --every 150
    python benchmarks/name_copy.py --shift          # name facts after unrelated passages
    python benchmarks/name_copy.py --model DIR      # measure a built model once

Each measure is taken twice: on facts as make-base writes them by default, and "shifted", after
one to three passages that do not name the question's entity. A model that found the name by
where it sits, not by reading, passes the first and fails the second. `--model` also measures
the skill where it is used, in the searcher's and generator's own prompts (`role_copies`).

Writes benchmarks/results/name_copy.json (name_copy_shift.json with --shift,
name_copy_models.json with --model).
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
from rolecall.basemodel.make import build_model, copy_steps, name_fact_text, train_step  # noqa: E402
from rolecall.basemodel.tokenizer import build_tokenizer  # noqa: E402
from rolecall.policies.model import resolve_model_dir  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.provenance import write_result  # noqa: E402

RESULT = Path(__file__).resolve().parent / "results" / "name_copy.json"
KINDS = ("question", "bridge", "answer")
ROLE_TURNS = ("first_query", "second_query", "answer_turn")


def _greedy(model, tok, prompt: str, max_new_tokens: int) -> str:
    """The model's greedy continuation of `prompt`, special tokens dropped."""
    ids = tok(prompt, add_special_tokens=False)["input_ids"]
    out = model.generate(torch.tensor([ids]), max_new_tokens=max_new_tokens, do_sample=False,
                         pad_token_id=tok.pad_token_id)
    return tok.decode(out[0, len(ids):], skip_special_tokens=True)


def copies(model, tok) -> dict[str, float]:
    """`exact_copies` on name facts as make-base writes them by default and shifted."""
    return {**exact_copies(model, tok), **exact_copies(model, tok, shift=True)}


def exact_copies(model, tok, n: int = 120, seed: int = 12345, shift: bool = False) -> dict[str, float]:
    """Share of held-out name facts of each kind the model completes exactly (greedy); with
    `shift`, on facts after unrelated passages (see `name_fact_text`), keyed `<kind>_shifted`."""
    rng = random.Random(seed)
    hit, seen = dict.fromkeys(KINDS, 0), dict.fromkeys(KINDS, 0)
    model.eval()
    with torch.no_grad():
        for _ in range(n):
            kind, prompt, name = name_fact_text(rng, shift)
            said = _greedy(model, tok, prompt, 12).split("\n")[0].strip()
            seen[kind] += 1
            hit[kind] += said == name
    model.train()
    suffix = "_shifted" if shift else ""
    return {kind + suffix: round(hit[kind] / seen[kind], 3) for kind in KINDS}


def role_copies(model, tok, episodes: int = 60, seed: int = 999) -> dict[str, float]:
    """The same skill in the search roles' own prompts: share of turns of oracle-played
    `search_answer` episodes (every play right) the model writes exactly, greedy: the searcher's
    first query (the question's name), its second (the bridge, read off the passages found) and
    the generator's answer."""
    from rolecall.basemodel.make import search_transcripts
    from rolecall.basemodel.transcripts import OracleRates

    render = lambda msgs: tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)  # noqa: E731
    hit, seen = dict.fromkeys(ROLE_TURNS, 0), dict.fromkeys(ROLE_TURNS, 0)
    model.eval()
    with torch.no_grad():
        for prompt, completion in search_transcripts(render, episodes, OracleRates(solve=1.0), seed):
            turn = ("answer_turn" if "Find evidence" not in prompt else "first_query" if "(nothing yet)" in prompt
                    else "second_query")
            seen[turn] += 1
            hit[turn] += _greedy(model, tok, prompt, 24).strip() == completion
    model.train()
    return {turn: round(hit[turn] / seen[turn], 3) for turn in ROLE_TURNS if seen[turn]}


def measure_saved(path: Path) -> int:
    """Exact copies of a built model (plain, shifted and in the roles' prompts), recorded under
    its directory's name in results/name_copy_models.json beside the build's own record."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tok = AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    point = {**copies(model, tok), **role_copies(model, tok)}
    print(json.dumps(point))
    out = RESULT.with_name("name_copy_models.json")
    record = json.loads(out.read_text()) if out.exists() else {}
    build = path / "rolecall_base.json"
    record[path.name] = {"date": time.strftime("%Y-%m-%d"), **point,
                         "build": json.loads(build.read_text()) if build.exists() else None}
    write_result(out, record, model_dir=path)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1800)
    ap.add_argument("--every", type=int, default=300)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--rows", type=int, default=16, help="rows a step (make-base's fact_batch)")
    ap.add_argument("--shift", action="store_true",
                    help="train on name facts placed after unrelated passages (results/name_copy_shift.json)")
    ap.add_argument("--model", help="measure this saved model once instead of training one")
    a = ap.parse_args()
    if a.steps < 1 or a.every < 1:
        ap.error("--steps and --every must be at least 1")
    torch.set_num_threads(os.cpu_count() or 1)
    if a.model:
        try:
            model_dir = resolve_model_dir(a.model, what="--model", hint=" (build one with `rolecall make-base --out DIR`)")
        except FileNotFoundError as e:
            ap.error(str(e))
        return measure_saved(model_dir)
    tok = build_tokenizer()
    model = build_model(tok, 0)
    plan = copy_steps(a.steps, a.rows, tok, 17, a.shift)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01, betas=(0.9, 0.98))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 30))  # make-base's warmup
    model.train()
    t0, curve = time.time(), []
    for step, rows in enumerate(plan, 1):
        loss = train_step(model, opt, sched, rows, tok.pad_token_id)
        if step % a.every == 0 or step == a.steps:
            point = {"step": step, "loss": round(loss.item(), 4), "elapsed_s": round(time.time() - t0, 1),
                     **copies(model, tok)}
            curve.append(point)
            print(json.dumps(point), flush=True)
    result = RESULT.with_name("name_copy_shift.json") if a.shift else RESULT
    result.parent.mkdir(parents=True, exist_ok=True)
    write_result(result, {
        "date": time.strftime("%Y-%m-%d"), "steps": a.steps, "rows": a.rows, "lr": a.lr, "shift": a.shift,
        "machine": {"cpus": os.cpu_count(), "threads": torch.get_num_threads(), "python": platform.python_version(),
                    "torch": torch.__version__},
        "curve": curve}, model_dir=None)  # trained from scratch here
    return 0


if __name__ == "__main__":
    sys.exit(main())
