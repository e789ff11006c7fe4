"""Can SmolLM2-135M-Instruct answer from evidence at all? search_answer's generator at step 0.

    rolecall get-model smollm2-135m          # once
    python benchmarks/real_search_start.py   # about 3 minutes on 2 cores

DAC ("Divide and Cooperate") trains a generator that answers from retrieved passages or
abstains. Its rewards pay a right answer; a generator that never answers right gets its only
reward from abstaining. This measures, on the built-in multi-hop task's tuning world (task seed
7: other invented names and questions than the world a run trains on), with the real tier's
plain-text readers (`reward.answer_from: boxed_or_last_line`), at T = 0.7 with a seed per
request:

- **one hop**: "In which town was X born?" / "Which firm does X work for?", with the question's
  own top-3 BM25 passages as evidence (X's passage among them): exact match, token F1 and how
  often the reply names the answer anywhere, under several wordings of the generator's prompt;
- **two hops, sufficient evidence**: the question's two support passages among four others (the
  hard-positive setting), the `search_small` prompt.

Writes benchmarks/results/real_search_start.json with provenance.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import sys
import time
from pathlib import Path
from statistics import fmean

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.provenance import write_result  # noqa: E402  (after the path fix above)

RESULT = Path(__file__).resolve().parent / "results" / "real_search_start.json"
CONFIG = "configs/real/smollm2-search_answer.yaml"
PROMPTS = {
    "search_small": None,  # the shipped set's generator template
    "just the name": "Evidence:\n$evidence\n\n$question Reply with just the name.",
    "one word": "Read the evidence and answer the question in one word.\nEvidence:\n$evidence\nQuestion: $question",
    "a name in the evidence": "Evidence:\n$evidence\nQuestion: $question\nThe answer is a name that appears in the "
                              "evidence. Reply with that name only.",
}
_PERSON = re.compile(r"(\w+) was born in (\w+)\. \w+ works for (\w+)\.")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--people", type=int, default=48, help="people asked about (two one-hop questions each)")
    ap.add_argument("--out", type=Path, default=RESULT)
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from rolecall.config import load_config
    from rolecall.engines.base import GenRequest
    from rolecall.policies.model import resolve_model_dir
    from rolecall.retrieval import BM25Retriever
    from rolecall.rewards.qa import grade_qa
    from rolecall.tasks.multihop import MultiHopTask
    from rolecall.train.stack import build_stack
    from rolecall.workflows import load_prompts

    t0, load0 = time.time(), os.getloadavg()
    stack = build_stack(load_config(CONFIG, ["model.dtype=bfloat16", "task.seed=7"]))
    task = MultiHopTask(seed=7)
    retriever = BM25Retriever(task.passages)
    by_id = {p.id: p for p in task.passages}
    shipped = load_prompts("search_small")["generator"]

    def answer(questions: list[tuple[str, str, str]], template: str) -> dict:
        """questions: (question, gold, evidence text); EM, F1 and named rates of the replies."""
        reqs = [GenRequest(messages=[{"role": "user", "content": template.replace("$question", q).replace(
                    "$evidence", ev).replace("$abstain", "unknown")}], policy="base", max_new_tokens=24, seed=i)
                for i, (q, _, ev) in enumerate(questions)]
        replies = [o.completion_text for o in stack.engine.generate(reqs, temperature=0.7)]
        golds = [g for _, g, _ in questions]
        em = [grade_qa(r, [g], answer_from="boxed_or_last_line").info.get("em", 0.0) for r, g in zip(replies, golds)]
        f1 = [grade_qa(r, [g], answer_from="boxed_or_last_line", metric="f1").value for r, g in zip(replies, golds)]
        named = [g.lower() in r.lower() for r, g in zip(replies, golds)]
        return {"questions": len(questions), "em": fmean(em), "f1": round(fmean(f1), 4), "names_the_answer": fmean(named),
                "examples": replies[:3]}

    def show(passages) -> str:
        return "\n".join(f"[{i}] {p.render()}" for i, p in enumerate(passages, 1))

    one_hop = []
    for p in [p for p in task.passages if p.id.startswith("person:")][:args.people]:
        name, town, firm = _PERSON.match(p.text).groups()
        for q, gold in ((f"In which town was {name} born?", town), (f"Which firm does {name} work for?", firm)):
            hits = asyncio.run(retriever.search(q, 3))
            one_hop.append((q, gold, show(hits), any(h.id == p.id for h in hits)))
    doc: dict = {"config": CONFIG, "world": "multihop task seed 7 (tuning world)", "temperature": 0.7,
                 "one_hop_evidence_holds_the_passage": fmean(x[3] for x in one_hop), "one_hop": {}}
    for name, template in PROMPTS.items():
        doc["one_hop"][name] = answer([x[:3] for x in one_hop], template or shipped)
        print(f"one hop, {name!r}: {doc['one_hop'][name]['em']:.2f} EM, F1 {doc['one_hop'][name]['f1']:.3f}, "
              f"names the answer {doc['one_hop'][name]['names_the_answer']:.2f}", flush=True)
    rng = random.Random(0)
    two_hop = []
    for prob in task.questions[:len(one_hop)]:
        support = [by_id[i] for i in prob.meta["support"]]
        hits = [h for h in asyncio.run(retriever.search(prob.prompt, 6)) if h.id not in prob.meta["support"]][:4]
        shown = support + hits
        rng.shuffle(shown)
        two_hop.append((prob.prompt, prob.answer, show(shown)))
    doc["two_hop_sufficient"] = answer(two_hop, shipped)
    print(f"two hops, sufficient evidence: {doc['two_hop_sufficient']}", flush=True)
    doc["minutes"] = round((time.time() - t0) / 60, 2)
    doc["loadavg_before"], doc["loadavg_after"] = load0, os.getloadavg()
    write_result(args.out, doc, model_dir=resolve_model_dir("smollm2-135m"))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
