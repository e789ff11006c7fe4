"""`rolecall inspect`: one role's outputs on the same problems, side by side across steps.

Reads `val_samples.jsonl` (the same validation problems, same sampling seed, at every
validation), so a column differs from its neighbour only by the weights — the paper's
advice: read role outputs at a few well-chosen steps. Falls back to `samples.jsonl`
(training episodes, different problems each step) for runs that have no validation samples.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from rolecall.errors import UserError


class InspectError(UserError, ValueError):
    """The run directory cannot answer the question; the message says why."""


@dataclass
class Cell:
    text: str
    tokens: int
    finish: str
    reward: float | None


@dataclass
class View:
    source: str  # file the samples came from
    steps: list[int]
    # (problem uid, problem text, slot) -> step -> cell
    rows: dict[tuple[str, str, str], dict[int, Cell]]


def _read(path: Path) -> list[dict]:
    lines = path.read_text("utf-8").splitlines()
    out = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines):
                break  # a killed trainer can leave a torn last line
            raise InspectError(f"{path}:{i}: not a JSON line") from None
    return out


def load_view(run_dir: Path, role: str, steps: list[int] | None = None, max_problems: int = 4) -> View:
    run_dir = Path(run_dir)
    if not (run_dir / "metrics.jsonl").is_file():
        raise InspectError(f"{str(run_dir)!r} is not a run directory (no metrics.jsonl)")
    source = run_dir / "val_samples.jsonl"
    if not source.is_file() or not source.stat().st_size:
        source = run_dir / "samples.jsonl"
    samples = _read(source) if source.is_file() else []
    if not samples:
        raise InspectError(f"{str(run_dir)!r} has no samples yet (val_samples.jsonl / samples.jsonl are empty)")
    roles = sorted({t["role"] for s in samples for t in s["turns"]})
    if role not in roles:
        raise InspectError(f"--role {role!r}: no turns of that role in {source.name}; roles here: {roles}")
    have = sorted({s["step"] for s in samples})
    if steps:
        missing = [s for s in steps if s not in have]
        if missing:
            raise InspectError(f"--steps: no samples at {missing}; steps with samples: {have}")
    else:
        steps = _spread(have, 3)
    rows: dict[tuple[str, str, str], dict[int, Cell]] = {}
    problems: list[str] = []
    for s in samples:
        if s["step"] not in steps:
            continue
        uid = str(s.get("uid", s["problem"]))
        if uid not in problems:
            if len(problems) >= max_problems:
                continue
            problems.append(uid)
        for t in s["turns"]:
            if t["role"] == role:
                key = (uid, s["problem"], t["slot"])
                rows.setdefault(key, {}).setdefault(s["step"], Cell(t["completion"], t["tokens"], t["finish"], s["reward"]))
    return View(source.name, steps, rows)


def _spread(steps: list[int], k: int) -> list[int]:
    """First, middle and last step (k evenly spread), the default reading points."""
    if len(steps) <= k:
        return steps
    return sorted({steps[round(i * (len(steps) - 1) / (k - 1))] for i in range(k)})


def parse_steps(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InspectError(f"--steps {text!r}: expected comma-separated step numbers, e.g. 0,50,100") from None
