"""What a run had spent by each step, from its metric rows: problems, generated tokens and training
seconds (validation excluded: it is measurement, and its cost differs by workflow)."""
from __future__ import annotations

import math

MATCHINGS = ("problems", "generated_tokens", "wall_seconds")
COST_KEYS = {"problems": "rollout/problems", "generated_tokens": "tokens/generated", "wall_seconds": "time/step_s"}


def step_rows(rows: list[dict]) -> dict[int, dict]:
    """Training-step rows by step; a step logged twice (a resume after a kill) counts once, its last row."""
    return {r["step"]: r for r in rows if "event" not in r and "step" in r and "val/accuracy" not in r
            and any(k in r for k in COST_KEYS.values())}


def cumulative(rows: list[dict]) -> dict[int, dict[str, float]]:
    """step -> the cost spent by the end of that step, per matching (and step 0 at zero)."""
    total = dict.fromkeys(MATCHINGS, 0.0)
    out = {0: dict(total)}
    for step, row in sorted(step_rows(rows).items()):
        for m, key in COST_KEYS.items():
            v = row.get(key)
            total[m] += float(v) if isinstance(v, (int, float)) and math.isfinite(v) else 0.0
        out[step] = dict(total)
    return out


def totals(rows: list[dict]) -> dict[str, float]:
    """The whole run's cost per matching, and its last step (`steps`)."""
    cum = cumulative(rows)
    last = max(cum)
    return {**cum[last], "steps": float(last)}


def step_within(rows: list[dict], steps: list[int], matching: str, budget: float) -> int | None:
    """The last of `steps` (checkpoints) whose cumulative cost under `matching` is within `budget`;
    None when even the first is over it."""
    cum = cumulative(rows)
    fits = [s for s in sorted(steps) if s in cum and cum[s][matching] <= budget * (1 + 1e-9)]
    return fits[-1] if fits else None
