"""Math-answer grading: last boxed answer vs gold; fast exact checks, then math-verify."""
from __future__ import annotations

import re
from dataclasses import replace
from fractions import Fraction

from rolecall.parsing import final_answer
from rolecall.rewards.base import Score
from rolecall.rewards.math_judge import MathJudge, Outcome, default_judge

CHECKERS = ("math_verify", "strict")

# Normalisation walks answers in Python; a real final answer is never this long.
_MAX_ANSWER_CHARS = 2_000
# Beyond this an "number" is degenerate output; also stays under int()'s digit limit.
_MAX_DIGITS = 1_000

_LEFT_RIGHT = re.compile(r"\\(?:left|right)(?![a-zA-Z])")
_THOUSANDS = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_DECIMAL = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)"
_NUMBER = re.compile(_DECIMAL)
_SLASH_FRAC = re.compile(rf"({_DECIMAL})/({_DECIMAL})")
_TEX_FRAC = re.compile(rf"([+-]?)\\[dt]?frac\{{({_DECIMAL})\}}\{{({_DECIMAL})\}}")


def grade_math(completion: str, gold: str, *, missing_box_penalty: float = 0.0,
               checker: str = "math_verify", judge: MathJudge | None = None, answer_from: str = "boxed") -> Score:
    """1.0 if the last `\\boxed{}` after any think block is equivalent to `gold`, else 0.0.

    `answer_from` (`reward.answer_from`, see `rolecall.parsing.final_answer`) may add a
    fallback for completions with no box at all: the last number or the last line; then
    `info["extracted_from"]` says which one was graded ("boxed", "last_number", "last_line").
    Equivalence, cheapest first: equal after light LaTeX normalisation; equal as exact
    rationals when both sides are plain numbers (then that verdict is final, so `1/3` does
    not match `0.333`); otherwise, with `checker="math_verify"`, symbolic equivalence by
    math-verify in a killable worker under the judge's deadline.
    No answer (no closed, non-empty box, and no fallback found) scores -missing_box_penalty
    with status "no_answer".
    An answer the judge cannot handle (comparing it overran the deadline, crashed or raised,
    while the judge compares the gold with itself in time) scores 0.0 with status
    "pathological": otherwise a policy could escape a negative advantage by writing answers
    that make sympy spin. An empty gold answer, or a judge that fails even on that control,
    is "unscorable" (value None): the sample is left out of the group statistics instead of
    getting a fake 0.
    """
    if checker not in CHECKERS:
        raise ValueError(f"checker: unknown {checker!r}; allowed: {list(CHECKERS)}")
    if not gold or not gold.strip():
        return Score(None, "unscorable", info={"reason": "empty gold answer"})
    found = final_answer(completion, answer_from)
    pred = found.text
    if not pred:
        score = Score(0.0 - missing_box_penalty, "no_answer", pred or None)
    else:
        score = _judged(pred, gold, checker, judge)
    if answer_from == "boxed":
        return score
    return replace(score, info={**score.info, "extracted_from": found.source})


def _judged(pred: str, gold: str, checker: str, judge: MathJudge | None) -> Score:
    if answers_match(pred, gold):
        return Score(1.0, "ok", pred)
    if checker == "strict" or _plain_numbers(pred, gold):
        return Score(0.0, "wrong", pred)
    if len(pred) > _MAX_ANSWER_CHARS:
        return Score(0.0, "wrong", pred[:200], info={"reason": "answer too long to be a final answer"})
    verdict = (judge or default_judge()).judge(pred, gold)
    if verdict.outcome is Outcome.PATHOLOGICAL:
        return Score(0.0, "pathological", pred, info={"reason": verdict.reason})
    if verdict.outcome is Outcome.FAULT:
        return Score(None, "unscorable", pred, info={"reason": verdict.reason})
    equal = verdict.outcome is Outcome.EQUAL
    return Score(1.0 if equal else 0.0, "ok" if equal else "wrong", pred)


def _plain_numbers(pred: str, gold: str) -> bool:
    return _to_fraction(_normalize(pred)) is not None and _to_fraction(_normalize(gold)) is not None


def answers_match(pred: str, gold: str) -> bool:
    """Equal after light LaTeX normalisation, or equal as exact rationals.

    Never evaluates expressions: only plain integers, decimals, `a/b` and
    `\\frac{a}{b}` are read as numbers, so `2+2` does not match `4`.
    """
    if pred.strip() == gold.strip():
        return True
    if len(pred) > _MAX_ANSWER_CHARS or len(gold) > _MAX_ANSWER_CHARS:
        return False
    p, g = _normalize(pred), _normalize(gold)
    if not p or not g:
        return False
    if p == g:
        return True
    p_num, g_num = _to_fraction(p), _to_fraction(g)
    return p_num is not None and p_num == g_num


def _normalize(ans: str) -> str:
    # Wrappers can nest in any order (`$\text{5}$.`), so peel until nothing changes.
    prev = None
    while ans != prev:
        prev = ans
        ans = "".join(ans.split())  # whitespace is not significant in math mode
        ans = _LEFT_RIGHT.sub("", ans)
        ans = ans.removesuffix(".")
        if len(ans) >= 2 and ans[0] == "$" and ans[-1] == "$":
            ans = ans.strip("$")
        ans = _unwrap(ans, "\\text{")
    ans = ans.replace("{,}", ",")  # LaTeX thousands separator 1{,}000
    if _THOUSANDS.fullmatch(ans):
        ans = ans.replace(",", "")
    return ans


def _unwrap(ans: str, head: str) -> str:
    """`head...}` -> `...` only if the brace opened by `head` closes at the very end."""
    if not (ans.startswith(head) and ans.endswith("}")):
        return ans
    depth = 1
    for i in range(len(head), len(ans)):
        depth += {"{": 1, "}": -1}.get(ans[i], 0)
        if depth == 0:
            return ans[len(head):-1] if i == len(ans) - 1 else ans
    return ans


def _to_fraction(ans: str) -> Fraction | None:
    """Exact value of a plain number, `a/b` or `\\frac{a}{b}`; None for anything else."""
    if sum(c.isdigit() for c in ans) > _MAX_DIGITS:
        return None
    if _NUMBER.fullmatch(ans):
        return Fraction(ans)
    if m := _SLASH_FRAC.fullmatch(ans):
        num, den = Fraction(m[1]), Fraction(m[2])
        return num / den if den else None
    if m := _TEX_FRAC.fullmatch(ans):
        num, den = Fraction(m[2]), Fraction(m[3])
        if not den:
            return None
        return -num / den if m[1] == "-" else num / den
    return None
