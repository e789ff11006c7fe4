"""Each multi-agent cell against the single-agent control of the same seed, at matched cost.

"Does training this workflow beat training one model alone?" has three answers, one per
thing held equal:

- **problems**: both runs trained on the same number of problems (what a grid that gives every
  cell the same steps x problems per step holds equal);
- **generated tokens**: a multi-agent episode makes 3-7 model calls, so per problem it
  generates several times the control's tokens;
- **wall time**: what a user with a fixed machine budget pays (training steps only: validation
  is measurement, and its cost differs by workflow).

For one pair (run, control) and one matching, the budget is the smaller of the two runs'
totals, and each run's accuracy is read off its validation curve at the last validation
within that budget (a step function: a run is credited only with what it had shown by then).
The difference run - control is paired by seed; over seeds it gets its mean and a 95 %
t interval (none from a single seed). Each run against its own step 0 (the untrained
workflow) is the fourth comparison.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace

from rolecall.grid.tables import GridData, RunData, Spread

MATCHINGS = ("problems", "generated_tokens", "wall_seconds")
# What a separate, longer control grid answers (`with_controls`): at equal problems the grid's own
# control stays the reference (the same schedule over the same problems).
LONGER_CONTROL_MATCHINGS = ("generated_tokens", "wall_seconds")
# Training-side cost per step, from the step rows (diagnostics.rollout_metrics, train.session).
COST_KEYS = {"problems": "rollout/problems", "generated_tokens": "tokens/generated", "wall_seconds": "time/step_s"}
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
         15: 2.131, 20: 2.086, 30: 2.042}


def t_quantile(df: int) -> float:
    """The two-sided 95 % quantile of Student's t with `df` degrees of freedom (table, then the
    nearest smaller tabulated df, which is conservative; 1.96 beyond 30)."""
    if df > 30:
        return 1.96
    return T_975[max(k for k in T_975 if k <= df)]


@dataclass(frozen=True)
class Paired(Spread):
    """Paired differences over seeds: a Spread with its 95 % t interval (None from one seed)."""

    @property
    def ci95(self) -> tuple[float, float] | None:
        if self.n < 2:
            return None
        half = t_quantile(self.n - 1) * statistics.stdev(self.values) / math.sqrt(self.n)
        return self.mean - half, self.mean + half

    def as_dict(self, digits: int = 4) -> dict:
        """The differences, their mean and 95 % interval, rounded, as a result file records them."""
        return {"values": [round(v, digits) for v in self.values],
                "mean": None if self.mean is None else round(self.mean, digits),
                "ci95": None if self.ci95 is None else [round(x, digits) for x in self.ci95], "n": self.n}


def curve(run: RunData) -> list[tuple[dict[str, float], float]]:
    """(cumulative cost per matching, accuracy) at each validation of the run, in step order.
    A step logged twice (a resume) counts once, its last row."""
    steps: dict[int, dict] = {}
    vals: dict[int, float] = {}
    for r in run.rows:
        if "event" in r or "step" not in r:
            continue
        if "val/accuracy" in r:
            if isinstance(r["val/accuracy"], (int, float)) and math.isfinite(r["val/accuracy"]):
                vals[r["step"]] = float(r["val/accuracy"])
        else:
            steps[r["step"]] = r
    out, total = [], dict.fromkeys(MATCHINGS, 0.0)
    ordered = sorted(steps)
    i = 0
    for step in sorted(vals):
        while i < len(ordered) and ordered[i] <= step:
            row = steps[ordered[i]]
            for m, key in COST_KEYS.items():
                v = row.get(key)
                total[m] += float(v) if isinstance(v, (int, float)) and math.isfinite(v) else 0.0
            i += 1
        out.append((dict(total), vals[step]))
    return out


def accuracy_within(points: list[tuple[dict[str, float], float]], matching: str, budget: float) -> float | None:
    """The accuracy of the last validation whose cumulative cost is within `budget`."""
    seen = [acc for cost, acc in points if cost[matching] <= budget * (1 + 1e-9)]
    return seen[-1] if seen else None


def pair_difference(a: list[tuple[dict[str, float], float]], b: list[tuple[dict[str, float], float]],
                    matching: str) -> float | None:
    """run - control (their `curve`s) at the smaller of their total costs under `matching`."""
    if not a or not b:
        return None
    budget = _budget(a, b, matching)
    x, y = accuracy_within(a, matching, budget), accuracy_within(b, matching, budget)
    return None if x is None or y is None else x - y


def reach(a: list[tuple[dict[str, float], float]], b: list[tuple[dict[str, float], float]],
          matching: str) -> float | None:
    """How much of run `a`'s own total cost a pair with `b` reads under `matching` (1.0: all of it).
    Below 1 the control's whole run cost less than the cell's, and the pair compares the cell's
    early steps with the control's end."""
    if not a or not b or a[-1][0][matching] <= 0:
        return None
    return _budget(a, b, matching) / a[-1][0][matching]


def _budget(a: list[tuple[dict[str, float], float]], b: list[tuple[dict[str, float], float]], matching: str) -> float:
    """The cost a pair is read at: the smaller of the two runs' totals."""
    return min(a[-1][0][matching], b[-1][0][matching])


def with_controls(g: GridData, controls: GridData) -> GridData:
    """`g` with its single-agent controls replaced by those of another grid directory (a longer
    control, say), paired with `g`'s cells by seed and setting labels as `g`'s own would be. That
    grid's controls, or, in a grid of one method cell (a control trained as the grid's only
    workflow, as configs/grids/real_long_control.yaml does), that cell's runs."""
    runs = [r for r in controls.runs if r.kind == "control"]
    if not runs:
        cells = controls.groups("run")
        if len(cells) != 1:
            raise ValueError(f"{controls.path}: holds no control and {len(cells)} method cells; the controls to "
                             "compare against must be that grid's controls or its one method cell")
        runs = next(iter(cells.values()))
    swapped = [replace(r, kind="control") for r in runs]
    return GridData(g.path, g.axes, [r for r in g.runs if r.kind != "control"] + swapped)


def comparisons(g: GridData, controls: GridData | None = None) -> list[dict]:
    """Per (setting, method) cell: the paired difference against the control at each matching,
    and against its own step 0 (best and final), each over the cell's seeds. `reach` holds, per
    matching, the share of each cell run's own cost that its pair read. With `controls` (another
    grid directory's, see `with_controls`), equal tokens and equal time read those instead, and
    the row's `paired_with_longer` says with how many of them."""
    rows = _comparisons(g)
    if controls is None:
        return rows
    longer = {(r["setting"], r["method"]): r for r in _comparisons(with_controls(g, controls))}
    if any(r["seeds"] for r in rows) and not any(o["paired"] for o in longer.values()):
        raise ValueError(f"{controls.path}: no finished run there shares a seed and setting with a finished cell "
                         f"of {g.path}; the longer controls must be trained on the grid's seeds")
    for r in rows:
        other = longer[(r["setting"], r["method"])]
        r["paired_with_longer"] = other["paired"]
        for m in LONGER_CONTROL_MATCHINGS:
            r[m], r["reach"][m] = other[m], other["reach"][m]
    return rows


def _comparisons(g: GridData) -> list[dict]:
    rows = []
    for (setting, method), cell_runs in g.groups("run").items():
        done = [r for r in cell_runs if r.status == "done"]
        pairs = [(curve(r), curve(c)) for r in done for c in [g.control_for(r)] if c is not None]
        row = {"setting": setting, "method": method, "seeds": len(done), "paired": len(pairs),
               "routing": done[0].routing if done else "",
               "reach": {m: Spread.of(reach(r, c, m) for r, c in pairs) for m in MATCHINGS}}
        for m in MATCHINGS:
            row[m] = Paired(tuple(d for r, c in pairs if (d := pair_difference(r, c, m)) is not None))
        for key in ("peak", "final"):
            row[f"{key}_vs_own_base"] = Paired(tuple(r.acc(key) - r.acc("base") for r in done
                                                     if r.acc(key) is not None and r.acc("base") is not None))
        rows.append(row)
    return rows


def mean_curves(g: GridData) -> list[dict]:
    """Per cell (the controls too): its validation curve over seeds against each matching's
    cumulative cost: (costs, mean accuracy, lowest, highest) at each validation, the seeds'
    points taken in step order (a seed with fewer validations shortens the cell's curve)."""
    out = []
    groups = [("control", k, v) for k, v in g.groups("control").items()] + \
             [("run", k, v) for k, v in g.groups("run").items()]
    for kind, (setting, method), cell_runs in groups:
        curves = [c for r in cell_runs if r.status == "done" and (c := curve(r))]
        if not curves:
            continue
        n = min(map(len, curves))
        by = {}
        for m in MATCHINGS:
            xs = [statistics.fmean(c[i][0][m] for c in curves) for i in range(n)]
            accs = [[c[i][1] for c in curves] for i in range(n)]
            by[m] = (xs, [statistics.fmean(a) for a in accs], [min(a) for a in accs], [max(a) for a in accs])
        out.append({"setting": setting, "method": method, "kind": kind, "seeds": len(curves),
                    "routing": cell_runs[0].routing, "by": by})
    return out
