"""The run summary (summary.json): the paper's run-level statistics as a pure function of the metric rows.

From "When Does Multi-Agent RL Improve LLM Workflows? Workflow, Scale, and Policy-Sharing Tradeoffs":

- Table 2: per role and per policy, the ratio of token χ², training perplexity and adapter grad
  norm at their peak over their first measurable value (the first at or above the statistic's
  floor, `FLOORS`), and the step at which χ² peaks.
- Fig. 5: per role and per policy, the run's maximum χ², maximum grad norm and entropy collapse depth
  (first entropy minus the minimum).
- The validation curve: base (step 0), peak, final, peak minus final (`cliff`), and the deepest
  fall below an earlier peak (`fall`, from `fall_from_step` to `fall_step`): a cliff is a fall
  of the run's `alarms.cliff_margin` or more.
- Alarm counts and the last training step.
- Why the run stopped early (`stopped`: the deadline or the early stop below the peak; null otherwise).
- Which code wrote it (`sittings`, by `write_summary` from `<run>/sittings.jsonl`: each start or
  resume's step, rolecall version and source commit, `rolecall.rundir.sitting`).

Nulls, NaN/Inf and non-numbers are skipped. A step logged twice (a resumed run) keeps its last row, as
the report does. See docs/diagnostics.md, "Run summary (summary.json)".
"""
from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

from rolecall.diagnostics.metrics_log import read_metrics
from rolecall.fsio import write_atomic

RATIO_METRICS = ("chi2_token", "training_ppl", "grad_norm")
# Table 2 divides a statistic's peak by its first *measurable* value: the first at or above its
# floor. Below the floor a value is noise around zero, and a ratio over it measures the noise
# (on-policy χ² is ~1e-9 in float32, which once printed as a 123,260x "amplification"). χ²'s
# floor is above the sampler/trainer mismatch of bfloat16 rollouts (measured up to 7e-3 a token
# on the real tier); a grad norm below 1e-6 is a step whose advantages were all zero; a
# perplexity is at least 1, always measurable.
FLOORS = {"chi2_token": 1e-2, "training_ppl": 0.0, "grad_norm": 1e-6}
NOT_MEASURABLE = "never at or above its floor: not measurable"
# Which code wrote the run: one row per start or resume (written by `rolecall.rundir.sitting`).
SITTINGS = "sittings.jsonl"


def _num(v) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def _series(rows: list[dict], key: str) -> list[tuple[int, float]]:
    """(step, value) pairs of `key`, sorted by step, finite values only; a repeated step keeps its last row."""
    by_step: dict[int, float | None] = {}
    for r in rows:
        if key in r and "event" not in r:
            by_step[r["step"]] = _num(r[key])
    return [(s, by_step[s]) for s in sorted(by_step) if by_step[s] is not None]


def _peak(pts: list[tuple[int, float]]) -> tuple[float | None, int | None]:
    """(max value, its first step)."""
    if not pts:
        return None, None
    step, value = max(pts, key=lambda p: (p[1], -p[0]))  # ties: the earliest step
    return value, step


def _entities(rows: list[dict], kind: str) -> list[str]:
    """Names from `<kind>/<name>/<metric>` keys, in order of first appearance."""
    seen: dict[str, None] = {}
    for r in rows:
        for k in r:
            if k.startswith(kind + "/") and k.count("/") >= 2:
                seen.setdefault(k[len(kind) + 1:].rsplit("/", 1)[0], None)
    return list(seen)


def _ratio_stats(pts: list[tuple[int, float]], floor: float) -> dict:
    """first and peak values, and peak over the first value at or above `floor` (`base`, at
    `base_step`); no ratio, and a note, when no value reaches the floor."""
    first = pts[0][1] if pts else None
    peak, peak_step = _peak(pts)
    base_step, base = next(((s, v) for s, v in pts if v >= floor and v > 0), (None, None))
    out = {"first": first, "peak": peak, "peak_step": peak_step, "floor": floor, "base": base,
           "base_step": base_step, "ratio": None}
    if pts and base is None:
        out["ratio_note"] = NOT_MEASURABLE
    elif base is not None:
        out["ratio"] = peak / base
    return out


def _table2(rows: list[dict], prefix: str) -> dict:
    out = {m: _ratio_stats(_series(rows, f"{prefix}/{m}"), FLOORS[m]) for m in RATIO_METRICS}
    out["chi2_peak_step"] = out["chi2_token"]["peak_step"]
    return out


def _amplitude(rows: list[dict], prefix: str) -> dict:
    entropy = [v for _, v in _series(rows, f"{prefix}/entropy")]
    return {"max_chi2": _peak(_series(rows, f"{prefix}/chi2_token"))[0],
            "max_grad_norm": _peak(_series(rows, f"{prefix}/grad_norm"))[0],
            "entropy_collapse": entropy[0] - min(entropy) if entropy else None}


def _fall(pts: list[tuple[int, float]]) -> dict:
    """The deepest fall of the curve below an earlier peak: how far (`fall`), from which step's
    peak (`fall_from_step`) to which step (`fall_step`). Peak minus final misses a run that fell
    and then partly recovered (0.80 -> 0.55 -> 0.75 is a 0.25 fall, not 0.05)."""
    if not pts:
        return {"fall": None, "fall_from_step": None, "fall_step": None}
    best = pts[0]
    out = {"fall": 0.0, "fall_from_step": None, "fall_step": None}
    for step, value in pts:
        if value > best[1]:
            best = (step, value)
        elif best[1] - value > out["fall"]:
            out = {"fall": best[1] - value, "fall_from_step": best[0], "fall_step": step}
    return out


def _accuracy(rows: list[dict]) -> dict:
    pts = _series(rows, "val/accuracy")
    peak, peak_step = _peak(pts)
    final_step, final = pts[-1] if pts else (None, None)
    return {"base": next((v for s, v in pts if s == 0), None), "peak": peak, "peak_step": peak_step,
            "final": final, "final_step": final_step, "cliff": peak - final if pts else None, **_fall(pts)}


def _stopped(rows: list[dict]) -> dict | None:
    """Why the run ended before `train.steps` (`train.max_minutes`, `train.stop_below_peak`), from
    its last "stop" event; None when a later training step shows a resume went on past it."""
    stop = None
    for r in rows:
        if r.get("event") == "stop":
            stop = {"reason": r.get("reason"), "step": r["step"], "message": r.get("message")}
        elif stop is not None and "event" not in r and r["step"] > stop["step"]:
            stop = None
    return stop


def summarize(rows: list[dict]) -> dict:
    """The run summary of metrics.jsonl rows (see the module docstring)."""
    kinds = {"roles": "role", "policies": "policy"}
    names = {group: _entities(rows, kind) for group, kind in kinds.items()}
    return {
        "table2": {g: {n: _table2(rows, f"{kinds[g]}/{n}") for n in names[g]} for g in kinds},
        "amplitude": {g: {n: _amplitude(rows, f"{kinds[g]}/{n}") for n in names[g]} for g in kinds},
        "accuracy": _accuracy(rows),
        "alarms": dict(sorted(Counter(str(r.get("alarm")) for r in rows if r.get("event") == "alarm").items())),
        "steps": max((r["step"] for r in rows if "event" not in r and "val/accuracy" not in r), default=0),
        "stopped": _stopped(rows),
    }


def write_summary(run_dir: Path) -> dict:
    """Summarize `run_dir`/metrics.jsonl (a torn last line is skipped) into `run_dir`/summary.json, atomically."""
    run_dir = Path(run_dir)
    rows, _ = read_metrics(run_dir / "metrics.jsonl")
    summary = summarize_run(run_dir, rows)
    write_atomic(run_dir / "summary.json", json.dumps(summary, indent=1) + "\n")
    return summary


def summarize_run(run_dir: Path, rows: list[dict]) -> dict:
    """What summary.json holds for `run_dir`: `summarize(rows)` of its metric rows, and its
    sittings (their own file: no metric row holds them). One place, for every reader that
    recomputes a run's summary."""
    return {**summarize(rows), "sittings": read_sittings(run_dir)}


def read_sittings(run_dir: Path) -> list[dict]:
    """`run_dir`/sittings.jsonl in order (a torn last line skipped); [] for a run from before
    rolecall recorded them."""
    path = Path(run_dir) / SITTINGS
    return read_metrics(path)[0] if path.is_file() else []
