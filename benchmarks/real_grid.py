"""The paper's matrix on SmolLM2 (`configs/grids/real.yaml`), with seeds, and what it answers.

    rolecall get-model smollm2-135m                  # once
    python benchmarks/real_grid.py                   # runs (or resumes) the grid, then records it
    python benchmarks/real_grid.py --collect-only    # record what the grid directory holds so far
    python benchmarks/real_grid.py --only seed=seed2 --keep-from OLD.json   # the rest of a grid whose
                                                     # directory was lost, kept with the earlier record's runs

The grid runs through the real CLI (`rolecall grid ... --resume`, so a stopped grid picks up
at its first unfinished cell; several hours on 2 cores, it can span sittings). Then every cell
is read from its run directory into `benchmarks/results/real_grid.json`: workflow, routing,
seed, base (step 0), best and final validation accuracy, the validation curve with the
cumulative problems, generated tokens and training seconds at each point, the deepest fall,
the last validation's role metrics against the trivial rules (a selecting role against
always-first and the majority, a judging role against always-"correct") and those metrics at
every validation (`validations`), the steps slowed by
other work on the machine (`slow_steps`: over 1.5x the median of their neighbours, and the
seconds they added), each role's reply length and gradient share over the first and last ten
steps (`role_shapes`, the paper's signature of Shared-Policy capture), and per cell the paired
differences against the single-agent control at equal problems, equal generated tokens and
equal wall time, and against its own step 0, each with its 95 % t interval over seeds
(`rolecall.grid.matching`). A cell that has not finished is listed with its status.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.learning import HERE, run_child  # noqa: E402  (after the path fix above)
from benchmarks.provenance import origin, write_result  # noqa: E402

GRID = HERE.parent / "configs" / "grids" / "real.yaml"
RESULT = HERE / "results" / "real_grid.json"
# Validation metrics that say what a selecting or judging role adds over a trivial rule.
RULE_KEYS = ("voting/selection_acc", "voting/rule_first_acc", "voting/rule_majority_acc", "voting/pass_at_k",
             "voting/aggregator_parsed", "eval_opt/evaluator_accuracy", "eval_opt/rule_always_correct_acc",
             "eval_opt/evaluator_parsed",
             # search_answer (configs/grids/real_search_answer.yaml): each role's share of the answer
             "search_answer/f1", "search_answer/em", "search_answer/sufficiency_rate",
             "search_answer/em_when_sufficient", "search_answer/abstain_rate", "search_answer/abstain_precision",
             # debate (configs/grids/real_debate.yaml): each round's accuracy, and answers fixed or broken between rounds
             "debate/round0_acc", "debate/round1_acc", "debate/fixed", "debate/broken")


def _step_rows(rows: list[dict]) -> list[dict]:
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
    steps = [(int(r["step"]), float(r["time/step_s"])) for r in _step_rows(rows)]  # in step order
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


# A role's output shape and pull on its policy, as the paper reads Shared-Policy capture: its
# median reply length (the aggregator's terse stamp vs the voters' worked answers) and its share
# of the per-step gradient mass of the policy it trains (1.0 for a role with a policy of its own).
SHAPE_KEYS = ("len_p50", "grad_share")


def role_shapes(rows: list[dict], window: int = 10) -> dict:
    """Per role: the mean of each SHAPE_KEYS metric over the first and over the last `window`
    training steps, as [first, last] (None where the role never logged it)."""
    steps = _step_rows(rows)
    roles = sorted({k.split("/")[1] for r in steps for k in r if k.startswith("role/") and k.count("/") == 2})

    def mean(part: list[dict], key: str) -> float | None:
        got = [r[key] for r in part if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
        return round(statistics.fmean(got), 3) if got else None

    return {role: {k: [mean(steps[:window], f"role/{role}/{k}"), mean(steps[-window:], f"role/{role}/{k}")]
                   for k in SHAPE_KEYS} for role in roles}


def validations(rows: list[dict]) -> list[dict]:
    """Each validation's step and its RULE_KEYS metrics, in step order (a step validated twice, by
    a resume, keeps its last row): what a bar on every validation step (search_answer's
    abstention never above half the questions) is read from."""
    out: dict[int, dict] = {}
    for r in rows:
        if "event" not in r and "val/accuracy" in r and "step" in r:
            out[int(r["step"])] = {"step": int(r["step"]), "accuracy": r["val/accuracy"],
                                   **{k: r[f"val/{k}"] for k in RULE_KEYS if f"val/{k}" in r}}
    return [out[k] for k in sorted(out)]


def run_record(g, run) -> dict:
    from rolecall.grid import matching

    vals = validations(run.rows)
    last_val = vals[-1] if vals else {}
    acc = (run.summary or {}).get("accuracy") or {}
    return {"cell": run.name, "kind": run.kind, "status": run.status, "labels": run.labels, "routing": run.routing,
            **{k: acc.get(k) for k in ("base", "peak", "peak_step", "final", "final_step", "fall", "fall_from_step",
                                        "fall_step")}, "cliff_margin": run.cliff_margin,
            "curve": [{**{m: round(c[m], 2) for m in matching.MATCHINGS}, "accuracy": a}
                      for c, a in matching.curve(run)],
            "rules_at_last_validation": {k: last_val[k] for k in RULE_KEYS if k in last_val},
            "validations": vals,
            "alarms": {f"{role}: {alarm}": n for (role, alarm), n in run.alarms.items()},
            "slow_steps": slow_steps(run.rows), "role_shapes": role_shapes(run.rows),
            "sittings": (run.summary or {}).get("sittings") or []}  # which commit wrote which steps


# Compared with a long control (configs/grids/real_long_control.yaml) where one has run: at equal
# problems the grid's own control keeps the reference (matching.LONGER_CONTROL_MATCHINGS).
def collect(grid_dir: Path, long_dir: Path | None = None) -> dict:
    """Every cell of the grid directory and the matched comparisons, as real_grid.json holds them;
    with `long_dir`, the comparisons at equal tokens and time read the long controls."""
    from rolecall.grid import matching, tables

    long_keys = matching.LONGER_CONTROL_MATCHINGS
    g = tables.load(grid_dir)
    rows = matching.comparisons(g)
    longs, long_rows = [], [None] * len(rows)
    if long_dir is not None:
        long_grid = tables.load(long_dir)
        longs = matching.with_controls(g, long_grid).done("control")
        long_rows = matching.comparisons(g, long_grid)  # same cells, same order; tokens and time read the long controls
    comparisons = []
    for r, long in zip(rows, long_rows):
        entry = _comparison(r)
        if long is not None and long["paired_with_longer"] > 0:
            entry["short_control"] = {k: entry[k] for k in long_keys}
            entry.update({k: long[k].as_dict() for k in long_keys})
            entry["long_control"] = {"paired": long["paired_with_longer"], "matchings": list(long_keys)}
        comparisons.append(entry)
    return {"grid": str(grid_dir), "axes": g.axes,
            "runs": [run_record(g, r) for r in g.runs] + [{**run_record(g, r), "kind": "long_control"} for r in longs],
            "against_control": comparisons, **({"long_controls": str(long_dir)} if long_dir else {}),
            "cells": _counts([r.status for r in g.runs])}


def _counts(statuses: list[str]) -> dict:
    return {s: statuses.count(s) for s in ("done", "failed", "started", "pending")}


def _comparison(r: dict) -> dict:
    """One row of `rolecall.grid.matching.comparisons` as the record holds it."""
    from rolecall.grid import matching

    return {"setting": list(r["setting"]), "method": list(r["method"]), "routing": r["routing"],
            "seeds": r["seeds"], "paired_with_control": r["paired"],
            **{k: r[k].as_dict() for k in (*matching.MATCHINGS, "peak_vs_own_base", "final_vs_own_base")}}


# A grid can outlive the machine it ran on: its directory lost, its record kept. Its remaining
# cells then run into a new directory (`rolecall grid ... --only seed=seed2`), and the record
# keeps the earlier record's finished runs, each saying where it was recorded.
def _run_of_record(rec: dict):
    """A finished run rebuilt from its record for the matched comparisons: its validation curve as
    metric rows (each validation with the costs since the one before) and its accuracy summary."""
    from rolecall.grid import matching
    from rolecall.grid.tables import RunData

    rows, before = [], dict.fromkeys(matching.MATCHINGS, 0.0)
    for i, point in enumerate(rec["curve"]):
        rows.append({"step": i, **{matching.COST_KEYS[m]: point[m] - before[m] for m in matching.MATCHINGS}})
        rows.append({"step": i, "val/accuracy": point["accuracy"]})
        before = point
    summary = {"accuracy": {k: rec.get(k) for k in ("base", "peak", "final")}}
    return RunData(rec["cell"], rec["kind"], dict(rec.get("labels") or {}), rec["status"], summary=summary,
                   routing=rec.get("routing") or "", rows=rows)


def keep_from(doc: dict, earlier: dict, source: str) -> dict:
    """`doc` with every run finished in `earlier` (a record of the same grid, from `source`) that
    `doc`'s directory has not finished, marked with where it was recorded (`kept_from`), and the
    comparisons against the control made again over all the finished runs."""
    from rolecall.grid import matching
    from rolecall.grid.tables import GridData

    shape = lambda d: [(a["name"], a["role"], list(a["labels"])) for a in d.get("axes") or []]  # noqa: E731
    if shape(doc) != shape(earlier):
        raise SystemExit(f"--keep-from {source}: its axes {shape(earlier)} are not this grid's {shape(doc)}")
    where = origin(earlier, source)
    old = {r["cell"]: r for r in earlier["runs"] if r["status"] == "done"}
    runs, kept = [], []
    for r in doc["runs"]:
        if r["status"] != "done" and r["cell"] in old:
            r = {**old[r["cell"]], "kept_from": old[r["cell"]].get("kept_from") or where}
            kept.append(r["cell"])
        runs.append(r)
    g = GridData(Path(doc["grid"]), doc["axes"], [_run_of_record(r) for r in runs if r["status"] == "done"])
    return {**doc, "runs": runs, "against_control": [_comparison(r) for r in matching.comparisons(g)],
            "kept": {"cells": kept, "from": where}, "cells": _counts([r["status"] for r in runs])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", type=Path, default=GRID)
    ap.add_argument("--out-dir", type=Path, default=Path("runs/real"), help="the grid directory")
    ap.add_argument("--collect-only", action="store_true", help="record the grid directory as it is; run nothing")
    ap.add_argument("--result", type=Path, default=RESULT)
    ap.add_argument("--long-controls", type=Path, default=None,
                    help="the grid directory of configs/grids/real_long_control.yaml, where it has run: the "
                         "comparisons at equal tokens and time then read those controls")
    ap.add_argument("--only", action="append", default=[], metavar="AXIS=LABEL",
                    help="run only these cells (`rolecall grid --only`); the record lists the rest as they stand")
    ap.add_argument("--keep-from", type=Path, default=None,
                    help="an earlier record of this grid whose directory is gone: its finished runs that the grid "
                         "directory has not finished are kept, each marked with where it was recorded")
    args = ap.parse_args(argv)
    if args.keep_from and args.long_controls:
        ap.error("--keep-from and --long-controls do not go together (a kept run's curve cannot be re-read)")
    earlier = json.loads(args.keep_from.read_text()) if args.keep_from else None  # before the result overwrites it
    if not args.collect_only:
        resume = ["--resume"] if (args.out_dir / "grid.json").is_file() else []
        only = [a for o in args.only for a in ("--only", o)]
        run_child([sys.executable, "-m", "rolecall", "grid", str(args.grid), "--out", str(args.out_dir), *resume,
                   *only], cwd=HERE.parent)
    doc = collect(args.out_dir, args.long_controls)
    if earlier is not None:
        doc = keep_from(doc, earlier, str(args.keep_from))
    from rolecall.policies.model import resolve_model_dir

    write_result(args.result, doc, model_dir=resolve_model_dir("smollm2-135m"))
    print(f"wrote {args.result}: {doc['cells']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
