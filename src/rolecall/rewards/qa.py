"""QA grading: normalised exact match and token F1 against a list of gold answers.

Normalisation is the SQuAD/HotpotQA one: lower-case, drop punctuation and the articles
a/an/the, collapse whitespace. The answer is the last `\\boxed{}` after any think block;
without one, the text after the last `Answer:` line marker; otherwise there is none. With
`reward.answer_from: boxed_or_last_line` (small models that never box), a reply with no
`\\boxed{` at all is graded on its last non-empty line, an `Answer:` / `The answer is` prefix
removed (`rolecall.parsing.final_answer`).

Citation markers (`[2]`, one or two digits) are dropped from the prediction before grading: search_answer lists
its evidence as `[1] ...`, `[2] ...`, and a small model answers `The answer is: [2] Tuthpen.`,
which names Tuthpen, not "2 Tuthpen". Gold answers are left as they are.
"""
from __future__ import annotations

import re
import string
from collections import Counter

from rolecall.parsing import final_answer, last_boxed, strip_think
from rolecall.rewards.base import Score

METRICS = ("em", "f1")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_ANSWER_MARK = re.compile(r"(?im)^\s*(?:final\s+)?answer\s*:\s*(.+?)\s*$")
_PUNCT = str.maketrans("", "", string.punctuation)
_CITATION = re.compile(r"\[\s*\d{1,2}\s*\]")  # evidence lists are short; `[1999]` is a year
_MAX_ANSWER_CHARS = 2_000


def normalize_answer(text: str) -> str:
    text = text.lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def f1(pred: str, gold: str) -> float:
    p, g = normalize_answer(pred).split(), normalize_answer(gold).split()
    if not p or not g:
        return float(p == g)
    common = sum((Counter(p) & Counter(g)).values())
    if not common:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def gold_answers(meta: dict, answer: str) -> list[str]:
    """A QA problem's gold answers: `meta["answers"]` (datasets with several), else its one answer."""
    return [a for a in (meta.get("answers") or [answer]) if isinstance(a, str) and a.strip()]


def extract_answer(completion: str) -> str | None:
    """The answer graded under `answer_from: boxed`: see the module docstring."""
    text = strip_think(completion)
    boxed = last_boxed(text)
    if boxed:
        return boxed
    marks = _ANSWER_MARK.findall(text[-20_000:])
    return marks[-1] if marks else None


def grade_qa(completion: str, golds: list[str], *, metric: str = "em", missing_answer_penalty: float = 0.0,
             answer_from: str = "boxed") -> Score:
    """Score = exact match (0/1) or the best F1 over the gold answers; status ok iff an exact match."""
    if metric not in METRICS:
        raise ValueError(f"metric: unknown {metric!r}; allowed: {list(METRICS)}")
    golds = [g for g in golds if isinstance(g, str) and normalize_answer(g)]
    if not golds:
        return Score(None, "unscorable", info={"reason": "no usable gold answer"})
    via = {}
    if answer_from == "boxed":
        pred = extract_answer(completion)
    else:
        found = final_answer(completion, answer_from)
        pred, via = found.text, {"extracted_from": found.source}
    pred = _CITATION.sub(" ", pred[:_MAX_ANSWER_CHARS]).strip() if pred else pred
    if not pred or not normalize_answer(pred):
        return Score(0.0 - missing_answer_penalty, "no_answer", pred, info=via)
    em = any(normalize_answer(pred) == normalize_answer(g) for g in golds)
    best_f1 = max(f1(pred, g) for g in golds)
    value = float(em) if metric == "em" else best_f1
    return Score(value, "ok" if em else "wrong", pred, info={"em": float(em), "f1": best_f1, **via})
