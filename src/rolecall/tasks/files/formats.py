"""Row dict -> `Problem` for each dataset format, or a `RowIssue` saying why the row is unusable.

Every row is checked here, at load time, so a broken row is reported with its index, field
and reason instead of turning into a reward of 0 during training. A row gets at most one
issue (the first problem found), so "rows skipped" and "issues" count the same thing.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rolecall.rewards.code.spec import TestSpecError, parse_tests
from rolecall.types import Problem

ID_COLUMNS = ("id", "uid", "problem_id", "question_id", "_id")

# Issue reasons (the categories counted in a LoadReport).
MISSING = "missing field"
BAD_VALUE = "bad value"
BAD_GOLD = "unparseable gold answer"
BAD_TESTS = "malformed test JSON"
TOO_LONG = "over-long prompt"
DUPLICATE = "duplicate id"


@dataclass(frozen=True)
class RowIssue:
    """Why row `index` (0-based position in the file, before any split) is unusable."""

    index: int
    field: str
    reason: str  # one of the categories above
    detail: str = ""

    def __str__(self) -> str:
        text = f"row {self.index}, field {self.field!r}: {self.reason}"
        return f"{text} ({self.detail})" if self.detail else text


class RowError(Exception):
    """Raised by a converter; becomes a RowIssue once the row index is known."""

    def __init__(self, field: str, reason: str, detail: str = "") -> None:
        super().__init__(f"{field}: {reason} {detail}")
        self.field, self.reason, self.detail = field, reason, detail


@dataclass(frozen=True)
class RowFormat:
    """How one dataset format maps a row: `prompt_field` names the prompt column in reports."""

    prompt_field: str
    convert: Callable[[dict[str, Any]], tuple[str, str, dict[str, Any]]]  # -> prompt, answer, meta


# --- field helpers ------------------------------------------------------------------------

def _required(row: dict[str, Any], field: str) -> Any:
    value = row.get(field)
    if value is None:  # absent key, or a null in a parquet/arrow column
        detail = f"{field!r} is null" if field in row else f"row has no {field!r}; it has {sorted(row)}"
        raise RowError(field, MISSING, detail)
    return value


def _text(row: dict[str, Any], field: str) -> str:
    value = _required(row, field)
    if not isinstance(value, str):
        raise RowError(field, BAD_VALUE, f"expected text, got {type(value).__name__}")
    if not value.strip():
        raise RowError(field, BAD_VALUE, "empty text")
    return value


def _gold_text(row: dict[str, Any], field: str) -> str:
    value = _required(row, field)
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise RowError(field, BAD_GOLD, f"expected text, got {type(value).__name__}")
    gold = str(value).strip()
    if not gold:
        raise RowError(field, BAD_GOLD, "empty answer")
    return gold


# --- formats ------------------------------------------------------------------------------

def _dapo_math(row: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    prompt = _required(row, "prompt")
    if isinstance(prompt, list):  # chat form: [{"role": "user", "content": ...}, ...]
        user = [m.get("content") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        if not user or not isinstance(user[-1], str) or not user[-1].strip():
            raise RowError("prompt", BAD_VALUE, "chat-form prompt has no non-empty user message")
        prompt = user[-1]
    else:
        prompt = _text(row, "prompt")
    if row.get("solution") is None and isinstance(row.get("reward_model"), dict):
        # The unprocessed DAPO-Math-17k keeps its gold in reward_model.ground_truth.
        return prompt, _gold_text(row["reward_model"], "ground_truth"), {"kind": "math"}
    return prompt, _gold_text(row, "solution"), {"kind": "math"}


# GSM8K golds are written "#### 1,234": strip commas that group thousands -> "1234".
_THOUSANDS_COMMA = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


def _gsm8k(row: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    question = _text(row, "question")
    solution = _required(row, "answer")
    if not isinstance(solution, str):
        raise RowError("answer", BAD_GOLD, f"expected text, got {type(solution).__name__}")
    if "####" not in solution:
        raise RowError("answer", BAD_GOLD, "no '#### <answer>' line")
    gold = _THOUSANDS_COMMA.sub("", solution.rsplit("####", 1)[1].strip())
    if not gold:
        raise RowError("answer", BAD_GOLD, "nothing after '####'")
    return question, gold, {"kind": "math", "solution": solution}


def _deepcoder(row: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    problem = _text(row, "problem")
    metadata = row.get("metadata")
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata) if metadata.strip() else None
        except json.JSONDecodeError as e:
            raise RowError("metadata", BAD_VALUE, f"not valid JSON ({e.msg} at char {e.pos})") from None
    if metadata is not None and not isinstance(metadata, dict):
        raise RowError("metadata", BAD_VALUE, f"expected an object, got {type(metadata).__name__}")
    fn_name = (metadata or {}).get("func_name") or None
    try:
        tests = parse_tests(_required(row, "tests"), fn_name=fn_name)
    except TestSpecError as e:
        raise RowError("tests", BAD_TESTS, str(e)) from None
    starter = row.get("starter_code")
    if starter is None:
        starter = ""
    if not isinstance(starter, str):
        raise RowError("starter_code", BAD_VALUE, f"expected text, got {type(starter).__name__}")
    if starter.strip():
        # The roles see only the prompt text, so the signature to implement goes into it.
        problem = f"{problem.rstrip()}\n\nStarter code:\n```python\n{starter.rstrip()}\n```"
    return problem, "", {"kind": "code", "tests": tests, "starter_code": starter}


def _qa(row: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    question = _text(row, "question")
    field = "answers" if row.get("answers") is not None else "answer"
    raw = _required(row, field)
    if isinstance(raw, dict) and isinstance(raw.get("text"), list):
        raw = raw["text"]  # SQuAD-style {"text": [...], "answer_start": [...]}
    items = raw if isinstance(raw, list) else [raw]
    if any(isinstance(a, bool) or not isinstance(a, (str, int, float)) for a in items):
        raise RowError(field, BAD_GOLD, "expected a string or a list of strings")
    golds = [str(a).strip() for a in items if str(a).strip()]
    if not golds:
        raise RowError(field, BAD_GOLD, "no non-empty gold answer")
    meta: dict[str, Any] = {"kind": "qa", "answers": golds}
    if row.get("context") is not None:  # HotpotQA's distractor setting: the row's own passages
        meta["context"] = _context(row["context"])
        if row.get("supporting_facts") is not None:
            meta["support"] = _support_titles(row["supporting_facts"])
    return question, golds[0], meta


def _context(raw: Any) -> list[dict[str, str]]:
    """A row's passages as [{id, title, text}] from any of HotpotQA's layouts: the original JSON
    ([[title, [sentence, ...]], ...]), the `datasets` one ({"title": [...], "sentences": [[...]]})
    or a list of {title, text} objects. The id is the title (numbered when a title repeats)."""
    if isinstance(raw, dict) and isinstance(raw.get("title"), list) and isinstance(raw.get("sentences"), list):
        raw = list(zip(raw["title"], raw["sentences"]))
    if not isinstance(raw, list) or not raw:
        raise RowError("context", BAD_VALUE, "expected a non-empty list of passages")
    out, seen = [], set()
    for i, item in enumerate(raw):
        if isinstance(item, dict):
            title, text = item.get("title", ""), item.get("text", item.get("sentences"))
        elif isinstance(item, (list, tuple)) and len(item) == 2:
            title, text = item
        else:
            raise RowError("context", BAD_VALUE, f"passage {i}: expected [title, sentences] or {{title, text}}")
        if isinstance(text, (list, tuple)) and all(isinstance(t, str) for t in text):
            text = "".join(text) if all(t[:1].isspace() or not t for t in text[1:]) else " ".join(text)
        if not isinstance(title, str) or not isinstance(text, str) or not text.strip():
            raise RowError("context", BAD_VALUE, f"passage {i}: title must be text and text non-empty")
        pid, n = title.strip() or str(i), 1
        while pid in seen:
            n += 1
            pid = f"{title.strip() or i}#{n}"
        seen.add(pid)
        out.append({"id": pid, "title": title.strip(), "text": text.strip()})
    return out


def _support_titles(raw: Any) -> list[str]:
    """Titles of the supporting facts: [[title, sentence], ...] or {"title": [...], "sent_id": [...]}."""
    titles = raw.get("title") if isinstance(raw, dict) else [f[0] for f in raw if isinstance(f, (list, tuple)) and f]
    if not isinstance(titles, list) or not all(isinstance(t, str) for t in titles):
        raise RowError("supporting_facts", BAD_VALUE, "expected [[title, sentence index], ...]")
    return list(dict.fromkeys(t.strip() for t in titles))


FORMATS: dict[str, RowFormat] = {
    "dapo_math": RowFormat("prompt", _dapo_math),
    "gsm8k": RowFormat("question", _gsm8k),
    "deepcoder": RowFormat("problem", _deepcoder),
    "qa": RowFormat("question", _qa),
}


# --- all rows -----------------------------------------------------------------------------

def row_id(row: dict[str, Any], fmt: str, index: int) -> tuple[str, str]:
    """(uid, column it came from); rows without an id column get `f"{fmt}-{index}"`."""
    for col in ID_COLUMNS:
        value = row.get(col)
        if value is not None and str(value).strip():
            return str(value), col
    return f"{fmt}-{index}", "id"


def prompt_checker(max_prompt_chars: int | None = None, count_tokens: Callable[[str], int] | None = None,
                   max_prompt_tokens: int | None = None) -> Callable[[str], str | None] | None:
    """A function returning why a prompt is too long (or None), or None when no limit is set."""
    if (count_tokens is None) != (max_prompt_tokens is None):
        raise ValueError("count_tokens and max_prompt_tokens must be given together")
    for name, limit in (("max_prompt_chars", max_prompt_chars), ("max_prompt_tokens", max_prompt_tokens)):
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ValueError(f"{name} must be a positive integer, got {limit!r}")
    if max_prompt_chars is None and count_tokens is None:
        return None

    def check(prompt: str) -> str | None:
        if max_prompt_chars is not None and len(prompt) > max_prompt_chars:
            return f"{len(prompt)} chars > max_prompt_chars {max_prompt_chars}"
        if count_tokens is not None:
            n = count_tokens(prompt)
            if n > max_prompt_tokens:
                return f"{n} tokens > max_prompt_tokens {max_prompt_tokens}"
        return None

    return check


def convert_rows(rows: Sequence[dict[str, Any]], fmt: str,
                 too_long: Callable[[str], str | None] | None = None) -> tuple[list[Problem], list[RowIssue]]:
    """Check every row; return the good rows as Problems (file order) and one issue per bad row."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown dataset format {fmt!r}; allowed: {sorted(FORMATS)}")
    spec = FORMATS[fmt]
    problems: list[Problem] = []
    issues: list[RowIssue] = []
    first_seen: dict[str, int] = {}
    for index, row in enumerate(rows):
        uid, id_col = row_id(row, fmt, index)
        if uid in first_seen:  # the first occurrence stays; later ones are the duplicates
            issues.append(RowIssue(index, id_col, DUPLICATE, f"{uid!r} first seen at row {first_seen[uid]}"))
            continue
        first_seen[uid] = index
        try:
            prompt, answer, meta = spec.convert(row)
        except RowError as e:
            issues.append(RowIssue(index, e.field, e.reason, e.detail))
            continue
        why = too_long(prompt) if too_long else None
        if why:
            issues.append(RowIssue(index, spec.prompt_field, TOO_LONG, why))
            continue
        problems.append(Problem(uid=uid, prompt=prompt, answer=answer, meta=meta))
    return problems, issues
