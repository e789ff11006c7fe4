"""Text parsing shared by workflows and verifiers: boxed answers and think blocks."""
from __future__ import annotations

import re

_THINK_CLOSE = "</think>"


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


_VERDICT = re.compile(r"\\boxed\{\s*(correct|incorrect)\s*\}", re.IGNORECASE)


def first_verdict(text: str) -> bool | None:
    """The evaluator's verdict as the paper's code reads it: the FIRST `\\boxed{Correct}` or
    `\\boxed{Incorrect}` after any think block (case and inner spaces ignored); True, False,
    or None when there is none. Other boxes (a leaked `\\boxed{42}`) are not verdicts."""
    m = _VERDICT.search(strip_think(text))
    return None if m is None else m.group(1).lower() == "correct"
