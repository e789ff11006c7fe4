"""What SmolLM2-135M-Instruct says about its own answers: the inputs of MPDF's meta-policy, at step 0.

    rolecall get-model smollm2-135m          # once
    python benchmarks/self_report.py         # about 2 minutes on 2 cores

The deliberation workflow's meta-policy ("Learning to Deliberate: Meta-policy Collaboration for
Agentic LLMs with Multi-agent Reinforcement Learning") reads each agent's self-report, written
in its reply (Confidence, Steps, Operations), and a critic's verdict on that reply. On `--problems`
training problems of the real tier's task (reasoning-gym's chain_sum; never the validation
split), sampled at T = 0.7 with a seed per request, this measures the base model:

- each `solve` wording: the share of replies with an answer (plain text: the last number), right,
  and with a readable Confidence / Steps / Operations line (`rolecall.metapolicy.parse_profile`);
- a confidence question asked after the answer, a second call (not the paper's, which has the
  agent report in its one reply): the share answered with a number, and whether the number
  separates right answers from wrong ones (its mean on each, and the AUROC: 0.5 = no signal);
- each critic wording: the share of verdicts read from plain words (`read_verdict`, plain), how
  often a read verdict matches the truth, and how often always saying "Incorrect" would on the
  same replies.

Writes benchmarks/results/self_report.json with provenance.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path
from statistics import fmean

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.provenance import write_result  # noqa: E402  (after the path fix above)

RESULT = Path(__file__).resolve().parent / "results" / "self_report.json"
CONFIG = "configs/real/smollm2-single.yaml"
SOLVE = {
    "question alone": "$problem",
    "confidence line": "$problem\nGive the answer, then a line Confidence: a number from 0 to 1.",
    "answer and confidence form": "$problem\nAnswer: <number>\nConfidence: <0 to 1>",
    "full self-report form": "Solve the problem. Reply as:\nAnswer: <number>\nSteps: <how many steps>\n"
                             "Operations: <how many operations>\nConfidence: <0 to 1>\n$problem",
}
ASK_CONFIDENCE = ("Question: $problem\nAnswer: $solution\nHow sure are you that this answer is right? "
                  "Reply with a number from 0 to 10.")
CRITIC = {
    "deliberation_small (Correct or Incorrect)": "Question: $problem\nProposed answer: $solution\n"
                                                 "Is the proposed answer correct? Reply Correct or Incorrect.",
    "check the solution": "Check the solution. Reply Correct or Incorrect.\n$problem\nSolution: $solution",
}
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def auroc(right: list[float], wrong: list[float]) -> float | None:
    """P(a right answer's number > a wrong one's), ties half (Mann-Whitney); None when a side is empty."""
    if not right or not wrong:
        return None
    wins = sum((r > w) + 0.5 * (r == w) for r in right for w in wrong)
    return wins / (len(right) * len(wrong))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", type=int, default=64)
    ap.add_argument("--out", type=Path, default=RESULT)
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from rolecall.config import load_config
    from rolecall.engines.base import GenRequest
    from rolecall.metapolicy.state import parse_profile
    from rolecall.parsing import final_answer, read_verdict
    from rolecall.policies.model import resolve_model_dir
    from rolecall.train.stack import build_stack

    t0 = time.time()
    load0 = os.getloadavg()
    stack = build_stack(load_config(CONFIG, ["model.dtype=bfloat16"]))
    problems = stack.train_P[:args.problems]

    def ask(template: str, solutions: list[str] | None = None, budget: int = 48, salt: int = 0) -> list[str]:
        texts = [template.replace("$problem", p.prompt).replace("$solution", (solutions or [""] * len(problems))[i].strip())
                 for i, p in enumerate(problems)]
        reqs = [GenRequest(messages=[{"role": "user", "content": t}], policy="base", max_new_tokens=budget,
                           seed=1000 * salt + i) for i, t in enumerate(texts)]
        return [o.completion_text for o in stack.engine.generate(reqs, temperature=0.7)]

    def right_of(replies: list[str]) -> list[bool]:
        answers = [parse_profile(r, "boxed_or_last_number").answer for r in replies]
        return [a is not None and a.strip() == str(p.answer).strip() for a, p in zip(answers, problems)]

    doc: dict = {"config": CONFIG, "problems": len(problems), "split": "training problems (never validation)",
                 "temperature": 0.7, "solve": [], "critic": []}
    first = None
    for k, (name, template) in enumerate(SOLVE.items()):
        replies = ask(template, salt=k)
        states = [parse_profile(r, "boxed_or_last_number") for r in replies]
        row = {"prompt": name, "template": template,
               "answered": fmean(s.answer is not None for s in states), "right": fmean(right_of(replies)),
               **{f"reports_{f}": fmean(getattr(s, f) is not None for s in states)
                  for f in ("confidence", "steps", "operations")},
               "examples": replies[:3]}
        doc["solve"].append(row)
        print(f"solve {name!r}: right {row['right']:.2f}, confidence {row['reports_confidence']:.2f}, "
              f"steps {row['reports_steps']:.2f}", flush=True)
        first = first if first is not None else replies
    right = right_of(first)
    numbers = []
    for reply in ask(ASK_CONFIDENCE, first, budget=24, salt=10):
        m = _NUMBER.search(reply)
        numbers.append(float(m.group(0)) if m else None)
    on_right = [n for n, r in zip(numbers, right) if n is not None and r]
    on_wrong = [n for n, r in zip(numbers, right) if n is not None and not r]
    doc["asked_confidence"] = {"template": ASK_CONFIDENCE, "answered_with_a_number": fmean(n is not None for n in numbers),
                               "mean_on_right": fmean(on_right) if on_right else None,
                               "mean_on_wrong": fmean(on_wrong) if on_wrong else None,
                               "n_right": len(on_right), "n_wrong": len(on_wrong), "auroc": auroc(on_right, on_wrong)}
    print(f"asked confidence: {doc['asked_confidence']}", flush=True)
    for k, (name, template) in enumerate(CRITIC.items()):
        verdicts = [read_verdict(r, "plain")[0] for r in ask(template, first, budget=24, salt=20 + k)]
        read = [(v, r) for v, r in zip(verdicts, right) if v is not None]
        row = {"prompt": name, "template": template, "read": len(read) / len(verdicts),
               "said_correct": fmean(v for v, _ in read) if read else None,
               "matches_truth": fmean(v == r for v, r in read) if read else None,
               "always_incorrect_matches": fmean(not r for _, r in read) if read else None}
        doc["critic"].append(row)
        print(f"critic {name!r}: {row}", flush=True)
    doc["round0_right"] = fmean(right)
    doc["minutes"] = round((time.time() - t0) / 60, 2)
    doc["loadavg_before"], doc["loadavg_after"] = load0, os.getloadavg()
    doc["answer_reader"] = "last number (" + final_answer.__name__ + ", boxed_or_last_number)"
    write_result(args.out, doc, model_dir=resolve_model_dir("smollm2-135m"))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
