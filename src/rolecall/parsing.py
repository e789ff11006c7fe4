"""Text parsing shared by workflows and verifiers: boxed answers, think blocks, and the final
answer a verifier grades (`final_answer`, which reads `reward.answer_from`)."""
from __future__ import annotations

import re
from collections.abc import Sequence
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
# first and, only when the reply holds no usable box, a plain-text form (`plain_pick_form`,
# `plain_verdict_form`). A deviation from the papers, for small models that never write a box.
ROLE_FORMATS = ("boxed", "plain")
# The kind of reply `read_pick` reports beside the pick, so that a run can say what its
# readings rest on. Only "boxed" and "plain" are picks; the rest name no single candidate:
# "none" names no number in 1..n at all; "echo": the only such numbers are counts quoted from
# the question ("Which of the 3 answers"); "value": the only such numbers are also candidates'
# answers (`Your answer is 3`: the value 3, or candidate 3?); "several": it names more than one
# candidate ("1 and 2", "either 1 or 3", "1, not 2"), or one beside a value that could be another.
PICK_FORMS = ("boxed", "plain", "none", "echo", "value", "several")
# `read_verdict`'s kinds: "several" is a reply with verdict words of both signs ("Correct ...
# no, incorrect"), which no first-word rule can settle honestly.
VERDICT_FORMS = ("boxed", "plain", "none", "several")
# A standalone integer: ASCII digits not part of a word (`x2`, `2nd`) nor of a longer, signed,
# decimal, fraction or grouped number (`12`, `-1`, `1.5`, `1/2`, `1,000`); `2:`, `2.`, `(2)` count.
_STANDALONE_INT = re.compile(r"(?<![\w.,/-])[0-9]+(?!\w|[.,/][0-9])")
# What makes an integer a candidate's number whatever else it could be: a word naming it
# (`candidate 2`, `option #2`, `choice 2`), `#2`, `(2)` / `[2]`, or `2:` / `2)` opening a line
# (the `k: text` listing a chooser is shown). Without one, an integer that equals a
# candidate's answer is read as that value, not as a pick.
_MARK_BEFORE = re.compile(r"(?:\b(?:candidate|option|choice)\s*(?:no\.?\s*|number\s*)?#?|#)\s*$", re.IGNORECASE)
# A count, not a pick: the integer right before the plural of what is chosen among (`the 3
# answers`, `2 candidates agree`), or right after `of the` / `all` / `these` (`which of the 3`).
_COUNT_AFTER = re.compile(r"\s*(?:answers|candidates|options|choices|solutions|responses|replies)\b", re.IGNORECASE)
_COUNT_BEFORE = re.compile(r"\b(?:of\s+the|of\s+these|of\s+those|all|these|those)\s+$", re.IGNORECASE)
# A verdict word (whole words, any case: `incorrect` is never read as `correct`), with an
# optional negation right before it (`not correct`, `isn't right`).
_VERDICT_WORD = re.compile(r"(?:(\bnot|n['\u2019]t)\s+)?\b(correct|incorrect|right|wrong)\b", re.IGNORECASE)
# "the correct answer is 5" says what the answer should be, not whether the judged one is right:
# a verdict word inside it is commentary, not a verdict.
_COMMENTARY = re.compile(r"\bthe\s+(?:correct|right)\s+(?:answer|solution|result|value|sum|total)\s*"
                         r"(?:is\b|was\b|would\s+be\b|should\s+be\b|=|:)", re.IGNORECASE)


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


def answer_values(answers: Sequence[str | None] | None) -> list[int | None]:
    """Each candidate's answer as an integer (`"4"`, `"4.0"`, `"$1,234$"`), None where it is
    none or no integer: the numbers a reply may state as a value rather than name as a candidate."""
    out: list[int | None] = []
    for a in answers or ():
        try:
            x = float((a or "").strip().strip("$").strip().replace(",", ""))
        except ValueError:
            x = None
        out.append(int(x) if x is not None and x.is_integer() else None)
    return out


def _mention_kind(text: str, start: int, end: int, values: list[int | None]) -> str:
    """How one standalone integer in 1..n of `text` (at start:end) reads: "mark" (a candidate
    whatever its value), "echo" (a count), "value" (a candidate's answer) or "name"."""
    before = text[max(0, start - 60):start]  # enough for any marker or count phrase
    line_start = not text[text.rfind("\n", 0, start) + 1:start].strip(" \t*_>`-")
    wrapped = text[start - 1:start] in ("(", "[") and text[end:end + 1] in (")", "]")
    if _MARK_BEFORE.search(before) or wrapped or (line_start and text[end:end + 1] in (":", ")")):
        return "mark"
    if _COUNT_AFTER.match(text, end) or _COUNT_BEFORE.search(before):
        return "echo"
    return "value" if int(text[start:end]) in values else "name"


def plain_pick_form(text: str, n: int, answers: Sequence[str | None] | None = None) -> tuple[int | None, str]:
    """(pick, kind) from the plain text of `text` after any think block: a pick only when it
    names exactly one candidate number in 1..n (kind "plain"), else None with the kind that
    says why ("none", "echo", "value", "several"; see `PICK_FORMS`).

    Each standalone integer in 1..n is a mention (others are skipped: `12 apples, so 2` names
    2). A marked one (`candidate 2`, `#2`, `(2)`, `2:` opening a line) names its candidate; an
    unmarked one names it unless it is a count (`of the 3 answers`) or, when `answers` (the
    candidates' final answers) is given, equal to one of them (`Your answer is 3`). Such a
    value beside a named candidate is read as quoting it only when it is the answer of a
    candidate named by a mark (`2: 4`, candidate 2's answer being 4); any other could be a
    second candidate (`either 1 or 3`, 3 being a value too), so the reply is "several". Mentions
    of two or more different candidates are "several", however they are worded ("1, not 2"):
    this reader does not parse negation or preference. A lone `2` is an unmarked mention.
    """
    text = strip_think(text)
    values, mentions = answer_values(answers), []
    for m in _STANDALONE_INT.finditer(text):
        digits = m.group(0)
        if len(digits) <= 9 and 1 <= int(digits) <= n:  # short: int() of 5,000 digits raises
            mentions.append((int(digits), _mention_kind(text, m.start(), m.end(), values)))
    names = {k for k, kind in mentions if kind in ("mark", "name")}
    quoted = {values[k - 1] for k, kind in mentions if kind == "mark" and k <= len(values)}
    unsure = {k for k, kind in mentions if kind == "value" and k not in names | quoted}
    if len(names) == 1 and not unsure:
        return names.pop(), "plain"
    if names:
        return None, "several"
    kinds = {kind for _, kind in mentions}
    return None, next((k for k in ("value", "echo") if k in kinds), "none")


def plain_pick(text: str, n: int, answers: Sequence[str | None] | None = None) -> int | None:
    """The candidate `text` names unambiguously in plain text (`plain_pick_form`), else None."""
    return plain_pick_form(text, n, answers)[0]


def read_pick(text: str, n: int, role_format: str = "boxed",
              answers: Sequence[str | None] | None = None) -> tuple[int | None, str]:
    """(pick in 1..n or None, kind in `PICK_FORMS`): `boxed_pick` ("boxed"), then under `plain`
    `plain_pick_form`; under `boxed` a reply without a usable box is "none". `answers`, the
    candidates' final answers, lets a plain reading tell a stated value from a pick."""
    _check_role_format(role_format)
    k = boxed_pick(text, n)
    if k is not None:
        return k, "boxed"
    if role_format == "plain":
        return plain_pick_form(text, n, answers)
    return None, "none"


def plain_verdict_form(text: str) -> tuple[bool | None, str]:
    """(verdict, kind) from the words correct / right (True) and incorrect / wrong (False) in
    `text` after any think block, whole words, any case. A `not` or `n't` right before a word
    negates it (`not correct` / `isn't right` are False, `not wrong` True); a word inside "the
    correct answer is ..." is commentary and skipped. All words agreeing: (that verdict,
    "plain"); words of both signs: (None, "several"); no word: (None, "none"). A heuristic:
    "Right, let me check" reads as True."""
    text = strip_think(text)
    skip = [m.span() for m in _COMMENTARY.finditer(text)]
    signs = {(m.group(2).lower() in ("correct", "right")) != bool(m.group(1))
             for m in _VERDICT_WORD.finditer(text) if not any(a <= m.start(2) < b for a, b in skip)}
    if len(signs) == 1:
        return signs.pop(), "plain"
    return None, "several" if signs else "none"


def plain_verdict(text: str) -> bool | None:
    """The verdict `text` gives unambiguously in plain words (`plain_verdict_form`), else None."""
    return plain_verdict_form(text)[0]


def read_verdict(text: str, role_format: str = "boxed") -> tuple[bool | None, str]:
    """(verdict or None, kind in `VERDICT_FORMS`): `first_verdict` ("boxed"), then under `plain`
    `plain_verdict_form`; under `boxed` a reply without a verdict box is "none"."""
    _check_role_format(role_format)
    v = first_verdict(text)
    if v is not None:
        return v, "boxed"
    if role_format == "plain":
        return plain_verdict_form(text)
    return None, "none"
