"""Text parsing shared by workflows and verifiers: boxed answers, think blocks, and the final
answer a verifier grades (`final_answer`, which reads `reward.answer_from`)."""
from __future__ import annotations

import re
from dataclasses import dataclass

_THINK_CLOSE = "</think>"
_BOX_KEY = "\\boxed{"
# The final answer sits at the end; scanning only the tail (and only the last few box
# openings) keeps degenerate repetition loops from making `last_boxed` quadratic.
TAIL_CHARS = 20_000
_MAX_BOX_CANDIDATES = 8

# `reward.answer_from`: where a verifier takes the answer from. The fallbacks apply only to a
# completion with no `\boxed{` at all (after any think block).
ANSWER_FROM = ("boxed", "boxed_or_last_number", "boxed_or_last_line")
# A plain number: integer or decimal, optional minus, thousands separators, or a/b. Not part of
# a word or of a longer number (`x2`, the `3` of `1.3`); a minus right after a digit, a letter
# or `)` (`5-3`, `(1+2)-3`) is an operator, not a sign.
_LAST_NUMBER = re.compile(r"(?<![\w.])(?:(?<![\d)])-)?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?(?!\d)")
_ANSWER_PREFIX = re.compile(r"^(?:the\s+)?(?:final\s+)?answer\b\s*(?:is\b)?\s*[:=]?\s*", re.IGNORECASE)


def strip_think(text: str) -> str:
    """Drop everything up to the last closing think tag (reasoning is not the answer)."""
    cut = text.rfind(_THINK_CLOSE)
    return text[cut + len(_THINK_CLOSE):] if cut >= 0 else text


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` with balanced braces, or None if there is none.

    An unclosed last box is treated as missing rather than guessed at.
    """
    key = "\\boxed{"
    start = text.rfind(key)
    while start >= 0:
        depth, i = 1, start + len(key)
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            return text[start + len(key): i - 1].strip()
        start = text.rfind(key, 0, start)
    return None


def answer_region(text: str) -> str:
    """Tail of `text` starting at one of its last few box openings (the whole tail if fewer)."""
    text = text[-TAIL_CHARS:]
    start = len(text)
    for _ in range(_MAX_BOX_CANDIDATES):
        found = text.rfind(_BOX_KEY, 0, start)
        if found < 0:
            return text
        start = found
    return text[start:]


@dataclass(frozen=True)
class FinalAnswer:
    """The answer a verifier grades and where it came from: `source` is "boxed" (the last
    `\\boxed{}`), "last_number" or "last_line" (the fallbacks), or "none" (`text` is None)."""

    text: str | None
    source: str


def final_answer(completion: str, answer_from: str = "boxed") -> FinalAnswer:
    """The final answer of `completion` after any think block, as `reward.answer_from` says.

    `boxed`: the content of the last closed `\\boxed{}` (tail only, see `answer_region`); an
    empty box is no answer. `boxed_or_last_number` / `boxed_or_last_line`: the same, and when
    the text holds no `\\boxed{` at all (not even an unclosed or empty one), the last plain
    number (`-12`, `3.5`, `1,234`, `3/4`; no LaTeX) or the last non-empty line (stripped, `**`
    bold and an `Answer:` / `Final answer:` prefix removed) of the text's tail.
    """
    if answer_from not in ANSWER_FROM:
        raise ValueError(f"answer_from: unknown {answer_from!r}; allowed: {list(ANSWER_FROM)}")
    text = strip_think(completion)
    boxed = last_boxed(answer_region(text))
    if boxed:
        return FinalAnswer(boxed, "boxed")
    if answer_from == "boxed" or _BOX_KEY in text:
        return FinalAnswer(None, "none")
    tail = text[-TAIL_CHARS:]
    if answer_from == "boxed_or_last_number":
        last = None
        for last in _LAST_NUMBER.finditer(tail):
            pass
        return FinalAnswer(last.group(0), "last_number") if last else FinalAnswer(None, "none")
    lines = [line for line in tail.splitlines() if line.strip()]
    line = _unbold(_ANSWER_PREFIX.sub("", _unbold(lines[-1]))) if lines else ""
    return FinalAnswer(line, "last_line") if line else FinalAnswer(None, "none")


def _unbold(text: str) -> str:
    return text.strip().strip("*").strip()


_VERDICT = re.compile(r"\\boxed\{\s*(correct|incorrect)\s*\}", re.IGNORECASE)


def first_verdict(text: str) -> bool | None:
    """The evaluator's verdict as the paper's code reads it: the FIRST `\\boxed{Correct}` or
    `\\boxed{Incorrect}` after any think block (case and inner spaces ignored); True, False,
    or None when there is none. Other boxes (a leaked `\\boxed{42}`) are not verdicts."""
    m = _VERDICT.search(strip_think(text))
    return None if m is None else m.group(1).lower() == "correct"


# `workflow.options.role_format`: how a workflow reads a decision (a pick, a verdict) out of a
# role's reply. `boxed` (default): the papers' `\boxed{}` forms only. `plain`: the boxed form
# first and, only when the reply holds no usable box, a plain-text form (`plain_pick`,
# `plain_verdict`). A deviation from the papers, for small models that never write a box.
# `read_pick` / `read_verdict` return (value, form), form "boxed", "plain" or "none".
ROLE_FORMATS = ("boxed", "plain")
# A standalone integer: ASCII digits not part of a word (`x2`, `2nd`) nor of a longer, signed,
# decimal, fraction or grouped number (`12`, `-1`, `1.5`, `1/2`, `1,000`); `2:`, `2.`, `(2)` count.
_STANDALONE_INT = re.compile(r"(?<![\w.,/-])[0-9]+(?!\w|[.,/][0-9])")
# A verdict word (whole words, any case: `incorrect` is never read as `correct`), with an
# optional negation right before it (`not correct`, `isn't right`).
_VERDICT_WORD = re.compile(r"(?:(\bnot|n['\u2019]t)\s+)?\b(correct|incorrect|right|wrong)\b", re.IGNORECASE)


def _check_role_format(role_format: str) -> None:
    if role_format not in ROLE_FORMATS:
        raise ValueError(f"role_format: unknown {role_format!r}; allowed: {list(ROLE_FORMATS)}")


def boxed_pick(text: str, n: int) -> int | None:
    """1-based candidate number from the last `\\boxed{}` of `text` (ASCII digits only: `str.isdigit`
    accepts superscripts like '²' that int() rejects), None if there is none or it is not in 1..n."""
    box = last_boxed(text)
    if box is None or not (box.isascii() and box.isdigit()):
        return None
    k = int(box)
    return k if 1 <= k <= n else None


def plain_pick(text: str, n: int) -> int | None:
    """The FIRST standalone integer in 1..n of `text` after any think block (integers outside
    1..n are skipped), else None. First, not last: a pick leads and what follows it quotes the
    candidates' values (SmolLM2-135M-Instruct writes `2: 4` for "candidate 2, whose answer is 4",
    and `The final answer is 1, not 2, which is just 3 and 4, not 3.`)."""
    for m in _STANDALONE_INT.finditer(strip_think(text)):
        digits = m.group(0)
        if len(digits) <= 9 and 1 <= int(digits) <= n:  # short: int() of 5,000 digits raises
            return int(digits)
    return None


def read_pick(text: str, n: int, role_format: str = "boxed") -> tuple[int | None, str]:
    """(pick in 1..n or None, form): `boxed_pick`, then under `plain` `plain_pick`."""
    _check_role_format(role_format)
    k = boxed_pick(text, n)
    if k is not None:
        return k, "boxed"
    if role_format == "plain" and (k := plain_pick(text, n)) is not None:
        return k, "plain"
    return None, "none"


def plain_verdict(text: str) -> bool | None:
    """The first of the words correct / right (True) and incorrect / wrong (False) in `text`
    after any think block, whole words, any case; None when there is none. A `not` or `n't`
    right before the word negates it: `not correct` / `isn't right` are False, `not wrong` True.
    First, as `first_verdict`: the verdict opens a review; later mentions ("the correct answer
    is ...") are commentary. A heuristic: "Right, let me check" reads as True."""
    m = _VERDICT_WORD.search(strip_think(text))
    if m is None:
        return None
    positive = m.group(2).lower() in ("correct", "right")
    return positive != bool(m.group(1))


def read_verdict(text: str, role_format: str = "boxed") -> tuple[bool | None, str]:
    """(verdict or None, form): `first_verdict`, then under `plain` `plain_verdict`."""
    _check_role_format(role_format)
    v = first_verdict(text)
    if v is not None:
        return v, "boxed"
    if role_format == "plain" and (v := plain_verdict(text)) is not None:
        return v, "plain"
    return None, "none"
