"""A grid's record: one JSON file that holds what the grid answers, read from its directory alone
(`rolecall grid record DIR --into FILE`, or `rolecall grid GRID.yaml --record FILE` after a run).

Per cell: its labels, status, base (step 0), peak, final and deepest fall of validation accuracy,
the validation curve with the cumulative problems, generated tokens and training seconds at each
point, every validation's metrics (what a workflow logs beside accuracy: a selecting role's
accuracy against its trivial rules, a judge's agreement with the verifier), the alarms, the steps
slowed by other work on the machine, each role's reply length and gradient share over the first
and last steps (the signature of Shared-Policy capture), and its sittings (which code wrote which
steps). Per setting and method: the paired differences against the single-agent control at equal
problems, equal generated tokens and equal wall time, and against its own step 0, each with its
95 % t interval over seeds (`rolecall.grid.matching`). With a directory of longer controls, the
comparisons at equal tokens and time read those. The provenance names rolecall's code, the
libraries, the machine, the base model and the command.
"""
from __future__ import annotations

import json
import math
import statistics
import time
from pathlib import Path

from rolecall.fsio import write_atomic
from rolecall.grid import matching
from rolecall.grid.tables import GridData, RunData, load

SHAPE_KEYS = ("len_p50", "grad_share")  # a role's median reply length; its share of its policy's gradient


def step_rows(rows: list[dict]) -> list[dict]:
    """One row per training step, in step order (a step logged twice, by a resume, keeps its last row)."""
    steps: dict[int, dict] = {}
    for r in rows:
        if "event" not in r and "step" in r and isinstance(r.get("time/step_s"), (int, float)):
            steps[int(r["step"])] = r
    return [steps[k] for k in sorted(steps)]


def slow_steps(rows: list[dict], window: int = 5, ratio: float = 1.5) -> dict:
    """Steps that took over `ratio` times the median of their neighbours (`window` steps each
    side), and their excess seconds over it: the footprint of other work sharing the machine,
    which a step's `time/step_s` includes. A slow phase of the run itself (long early replies)
    moves the neighbours too and is not flagged."""
    steps = [(int(r["step"]), float(r["time/step_s"])) for r in step_rows(rows)]
    times = [t for _, t in steps]
    flagged, excess = [], 0.0
    for i, (step, t) in enumerate(steps):
        near = times[max(0, i - window):i] + times[i + 1:i + window + 1]
        if not near:
            continue
        median = statistics.median(near)
        if t > ratio * median:
            flagged.append(step)
            excess += t - median
    return {"steps": flagged, "excess_s": round(excess, 1), "total_s": round(sum(times), 1)}


def role_shapes(rows: list[dict], window: int = 10) -> dict:
    """Per role: the mean of each SHAPE_KEYS metric over the first and over the last `window`
    training steps, as [first, last] (None where the role never logged it)."""
    steps = step_rows(rows)
    roles = sorted({k.split("/")[1] for r in steps for k in r if k.startswith("role/") and k.count("/") == 2})

    def mean(part: list[dict], key: str) -> float | None:
        got = [r[key] for r in part if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
        return round(statistics.fmean(got), 3) if got else None

    return {role: {k: [mean(steps[:window], f"role/{role}/{k}"), mean(steps[-window:], f"role/{role}/{k}")]
                   for k in SHAPE_KEYS} for role in roles}


def validations(rows: list[dict]) -> list[dict]:
    """Each validation's step, accuracy and every other metric it logged (`val/<name>` as
    `<name>`), in step order; a step validated twice, by a resume, keeps its last row."""
    out: dict[int, dict] = {}
    for r in rows:
        if "event" not in r and "val/accuracy" in r and "step" in r:
            extra = {k[4:]: v for k, v in r.items() if k.startswith("val/") and k != "val/accuracy"
                     and isinstance(v, (int, float)) and not isinstance(v, bool)}
            out[int(r["step"])] = {"step": int(r["step"]), "accuracy": r["val/accuracy"], **extra}
    return [out[k] for k in sorted(out)]


def run_record(run: RunData) -> dict:
    vals = validations(run.rows)
    last_val = {k: v for k, v in (vals[-1] if vals else {}).items() if k not in ("step", "accuracy")}
    acc = (run.summary or {}).get("accuracy") or {}
    return {"cell": run.name, "kind": run.kind, "status": run.status, "labels": run.labels, "routing": run.routing,
            **{k: acc.get(k) for k in ("base", "peak", "peak_step", "final", "final_step", "fall", "fall_from_step",
                                        "fall_step")}, "cliff_margin": run.cliff_margin,
            "curve": [{**{m: round(c[m], 2) for m in matching.MATCHINGS}, "accuracy": a}
                      for c, a in matching.curve(run)],
            "rules_at_last_validation": last_val, "validations": vals,
            "alarms": {f"{role}: {alarm}": n for (role, alarm), n in run.alarms.items()},
            "slow_steps": slow_steps(run.rows), "role_shapes": role_shapes(run.rows),
            "sittings": (run.summary or {}).get("sittings") or []}


def comparison(r: dict) -> dict:
    """One row of `matching.comparisons` as the record holds it."""
    return {"setting": list(r["setting"]), "method": list(r["method"]), "routing": r["routing"],
            "seeds": r["seeds"], "paired_with_control": r["paired"],
            **{k: r[k].as_dict() for k in (*matching.MATCHINGS, "peak_vs_own_base", "final_vs_own_base")}}


def counts(statuses: list[str]) -> dict:
    return {s: statuses.count(s) for s in ("done", "failed", "started", "pending")}


def collect(grid_dir: Path, long_dir: Path | None = None, g: GridData | None = None) -> dict:
    """Every cell of the grid directory and the matched comparisons; with `long_dir` (a grid of
    longer controls, same settings and seeds), the comparisons at equal tokens and time read the
    long controls while equal problems keeps the grid's own. `g`: the directory already loaded."""
    long_keys = matching.LONGER_CONTROL_MATCHINGS
    g = g or load(grid_dir)
    rows = matching.comparisons(g)
    longs, long_rows = [], [None] * len(rows)
    if long_dir is not None:
        long_grid = load(long_dir)
        longs = matching.with_controls(g, long_grid).done("control")
        long_rows = matching.comparisons(g, long_grid)  # same cells, same order
    comparisons = []
    for r, long in zip(rows, long_rows):
        entry = comparison(r)
        if long is not None and long["paired_with_longer"] > 0:
            entry["short_control"] = {k: entry[k] for k in long_keys}
            entry.update({k: long[k].as_dict() for k in long_keys})
            entry["long_control"] = {"paired": long["paired_with_longer"], "matchings": list(long_keys)}
        comparisons.append(entry)
    return {"what": "rolecall grid", "grid": str(grid_dir), "axes": g.axes,
            "runs": [run_record(r) for r in g.runs] + [{**run_record(r), "kind": "long_control"} for r in longs],
            "against_control": comparisons, **({"long_controls": str(long_dir)} if long_dir else {}),
            "cells": counts([r.status for r in g.runs])}


def provenance(g: GridData, command: str | None) -> dict:
    """rolecall's code and the libraries now, this machine, the base model of the first finished
    run with a checkpoint, the date and the command (each run's own sittings are in its entry)."""
    from rolecall.rundir.sitting import base_model_of
    from rolecall.rundir.sitting import code_version, library_versions, machine

    model = base_model_of(g.path / run.name for run in g.runs if run.status == "done")
    return {"code": code_version(), "versions": library_versions(), "machine": machine(), "model": model,
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command": command}


def write(grid_dir: Path, into: Path, *, long_dir: Path | None = None, command: str | None = None) -> dict:
    g = load(grid_dir)
    doc = {**collect(grid_dir, long_dir, g), "provenance": provenance(g, command)}
    into.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(into, json.dumps(doc, indent=1) + "\n")
    return doc


# -- reading a record: each method over seeds, and two methods paired by seed ---------------------
def _axes(doc: dict, role: str) -> list[str]:
    return [a["name"] for a in doc.get("axes") or [] if a.get("role") == role]


def largest_drop(curve: list[dict]) -> float:
    """The largest fall of validation accuracy between two consecutive validations (0 if none)."""
    accs = [p["accuracy"] for p in curve]
    return max([0.0, *(a - b for a, b in zip(accs, accs[1:]))])


RUN_STATS = {"base": lambda r: r["base"], "peak": lambda r: r["peak"], "final": lambda r: r["final"],
             "largest_drop": lambda r: largest_drop(r["curve"])}


def methods(doc: dict) -> dict[tuple[str, ...], dict[str, dict]]:
    """Each method's finished runs (kind run), keyed by its method-axis labels, then by seed label."""
    method_axes, seed_axes = _axes(doc, "method"), _axes(doc, "seed")
    out: dict[tuple[str, ...], dict[str, dict]] = {}
    for r in doc["runs"]:
        if r["kind"] == "run" and r["status"] == "done":
            key = tuple(r["labels"].get(a, "") for a in method_axes)
            out.setdefault(key, {})["-".join(r["labels"].get(a, "") for a in seed_axes)] = r
    return out


def method_stats(doc: dict) -> list[dict]:
    """Per method: its seeds and each RUN_STATS value over them, with the 95 % t interval of the mean."""
    return [{"method": list(key), "seeds": sorted(runs),
             **{name: matching.Paired.of([f(r) for r in runs.values()]).as_dict() for name, f in RUN_STATS.items()}}
            for key, runs in methods(doc).items()]


def method_difference(doc: dict, a: tuple[str, ...], b: tuple[str, ...], stat: str = "final") -> dict:
    """Method `a` minus method `b` on `stat`, paired by seed (the seeds both finished)."""
    runs = methods(doc)
    seeds = sorted(set(runs.get(a, {})) & set(runs.get(b, {})))
    f = RUN_STATS[stat]
    return {"seeds": seeds, **matching.Paired.of([f(runs[a][s]) - f(runs[b][s]) for s in seeds]).as_dict()}
