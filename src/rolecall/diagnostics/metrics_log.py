"""Reading a run's metrics.jsonl: the one parser every reader of a run's log uses (summary,
report, export, the Python API), tolerant of the torn last line a killed trainer leaves."""
from __future__ import annotations

import json
from pathlib import Path

from rolecall.errors import UserError


class ReportError(UserError, ValueError):
    """A run's files cannot be read as a report (the message names the file and line)."""


def read_metrics(path: Path) -> tuple[list[dict], list[str]]:
    """Parse metrics.jsonl. A malformed last line (a killed trainer) is skipped with a warning."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ReportError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    lines = text.splitlines()
    last = max((i for i, x in enumerate(lines) if x.strip()), default=-1)
    rows: list[dict] = []
    warnings: list[str] = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            if i == last:
                warnings.append(f"{path}:{i + 1}: skipped a truncated last line (the trainer was probably killed "
                                f"mid-write): {line[:80]!r}")
                continue
            raise ReportError(f"{path}:{i + 1}: not valid JSON ({e.msg}, column {e.colno})") from None
        if not isinstance(row, dict):
            raise ReportError(f"{path}:{i + 1}: expected a JSON object, got {type(row).__name__}")
        step = row.get("step")
        if isinstance(step, bool) or not isinstance(step, int):
            raise ReportError(f"{path}:{i + 1}: every row needs an integer 'step', got {step!r}")
        rows.append(row)
    if not rows:
        raise ReportError(f"{path}: no metrics rows (empty file); has the run logged a step yet?")
    return rows, warnings
