"""The paper's tables and figure data, computed from a grid directory's run directories.

From "When Does Multi-Agent RL Improve LLM Workflows? Workflow, Scale, and Policy-Sharing
Tradeoffs", per setting (the grid's setting axes) and method (its method axes):

- Table 1: base-model accuracy (the setting's base evaluation), the single-agent RL control's
  peak, each method's step-0 (workflow base), peak, peak step and final validation accuracy,
  the residual peak minus the control's peak (paired by seed), the cliff flag (the deepest fall
  below an earlier peak ≥ the run's `alarms.cliff_margin`), that fall and its step, and the
  alarms fired, per role;
- Table 2: per role and per policy, the ratios of token χ², training perplexity and grad norm
  at their peak over their first measurable value (see `diagnostics.summary.FLOORS`), and the
  step of the χ² peak (from each run's metric rows);
- Fig. 2: peak minus the run's own step-0 accuracy (the untrained workflow);
- Fig. 3: Isolated- vs Shared-Policy peak on cells that differ only in routing;
- Fig. 5: the run's maximum χ², maximum grad norm and entropy collapse, each the largest over
  the run's adapters.

Every statistic is over the seeds of a group: `Spread` keeps the values, their mean, sample
sd and range. Only finished cells count; the others are listed with their status.
"""
from __future__ import annotations

import json
import math
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from rolecall.grid import layout

CLIFF_MARGIN = 0.1  # alarms.cliff_margin's default, for a run whose config does not say
RATIOS = {"chi2": "chi2_token", "ppl": "training_ppl", "grad": "grad_norm"}
AMPLITUDES = ("max_chi2", "max_grad_norm", "entropy_collapse")


@dataclass(frozen=True)
class Spread:
    values: tuple[float, ...]

    @classmethod
    def of(cls, values) -> "Spread":
        return cls(tuple(float(v) for v in values if v is not None and math.isfinite(v)))

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.values) if self.values else None

    @property
    def sd(self) -> float | None:
        return statistics.stdev(self.values) if self.n > 1 else None

    @property
    def lo(self) -> float | None:
        return min(self.values, default=None)

    @property
    def hi(self) -> float | None:
        return max(self.values, default=None)


@dataclass
class RunData:
    """One cell as the report reads it."""

    name: str
    kind: str  # run | control | base
    labels: dict[str, str]
    status: str  # done | failed | started | pending
    error: str | None = None
    summary: dict = field(default_factory=dict)
    routing: str = "?"  # isolated | shared | custom
    cliff_margin: float = CLIFF_MARGIN
    alarms: Counter = field(default_factory=Counter)  # (role or "run", alarm) -> times fired
    rows: list[dict] = field(default_factory=list)  # its metric rows (the matched comparisons read the curves)

    def acc(self, key: str) -> float | None:
        return (self.summary.get("accuracy") or {}).get(key)

    @property
    def cliff(self) -> bool | None:
        """A fall below an earlier peak of `cliff_margin` or more (a summary older than the
        `fall` statistic: peak minus final)."""
        c = self.acc("fall") if "fall" in (self.summary.get("accuracy") or {}) else self.acc("cliff")
        return None if c is None else c >= self.cliff_margin - 1e-12

    def amplitude(self, stat: str) -> float | None:
        """The largest value of `stat` over the run's adapters (policies)."""
        vals = [a.get(stat) for a in (self.summary.get("amplitude") or {}).get("policies", {}).values()]
        return max((v for v in vals if v is not None), default=None)


def _read_run(out: Path, cell: dict) -> RunData:
    d = out / cell["name"]
    status, error = layout.status(d)
    run = RunData(cell["name"], cell["kind"], dict(cell.get("labels") or {}), status, error)
    if status != "done":
        return run
    try:
        cfg = yaml.safe_load((d / "config.yaml").read_text("utf-8")) or {}
    except (OSError, yaml.YAMLError):
        cfg = {}
    r = cfg.get("routing")
    run.routing = r if r in ("isolated", "shared") else "custom" if isinstance(r, dict) else "?"
    run.routing = run.routing if run.kind == "run" else ""  # a control or base cell is no IP or SP cell
    run.cliff_margin = float((cfg.get("alarms") or {}).get("cliff_margin", CLIFF_MARGIN))
    summary_path, metrics = d / "summary.json", d / "metrics.jsonl"
    # The summary is a function of the metric rows: recomputed from them where they are, so a run
    # summarized by an older rolecall is read by today's rules (the cliff, the ratios' floors).
    # A damaged metrics file falls back to the summary the run wrote (and no per-role alarms).
    from rolecall.diagnostics.metrics_log import ReportError, read_metrics
    from rolecall.diagnostics.summary import summarize_run

    try:
        run.rows = read_metrics(metrics)[0] if metrics.is_file() else []
    except ReportError:
        run.rows = []
    if run.rows:
        run.summary = summarize_run(d, run.rows)
    elif summary_path.is_file():
        run.summary = json.loads(summary_path.read_text("utf-8"))
    for ev in run.rows:  # summary.json counts alarms by kind; the report wants the role too
        if ev.get("event") == "alarm":
            run.alarms[(ev.get("role") or "run", str(ev.get("alarm")))] += 1
    return run


@dataclass
class GridData:
    path: Path
    axes: list[dict]  # name, role, keys, labels: from the index
    runs: list[RunData]

    def names(self, role: str) -> list[str]:
        return [a["name"] for a in self.axes if a["role"] == role]

    def key(self, run: RunData, role: str, blank: tuple[str, ...] = ()) -> tuple[str, ...]:
        """The run's labels on the axes of `role`, in file order; "" for an axis in `blank` or not applying."""
        return tuple("" if a in blank else run.labels.get(a, "") for a in self.names(role))

    @property
    def routing_axes(self) -> tuple[str, ...]:
        """Method axes that set the routing: what Fig. 3 and Fig. 5 hold fixed to pair IP with SP."""
        return tuple(a["name"] for a in self.axes if a["role"] == "method" and
                     any(k == "routing" or k.startswith("routing.") for k in a["keys"]))

    def done(self, kind: str) -> list[RunData]:
        return [r for r in self.runs if r.kind == kind and r.status == "done"]

    def groups(self, kind: str = "run") -> dict[tuple, list[RunData]]:
        """(setting key, method key) -> that cell's runs over seeds (any status), in grid order."""
        out: dict[tuple, list[RunData]] = {}
        for r in self.runs:
            if r.kind == kind:
                out.setdefault((self.key(r, "setting"), self.key(r, "method")), []).append(r)
        return out

    def control_for(self, run: RunData) -> RunData | None:
        return next((c for c in self.done("control") if self.key(c, "setting") == self.key(run, "setting")
                     and self.key(c, "seed") == self.key(run, "seed")), None)


def load(out: str | Path) -> GridData:
    out = Path(out)
    index = layout.read_index(out)
    return GridData(out, list(index.get("axes") or []), [_read_run(out, c) for c in index["cells"]])


def _alarm_text(runs: list[RunData]) -> str:
    total = sum((r.alarms for r in runs), Counter())
    return "; ".join(f"{role}: {alarm}" + (f" ×{n}" if n > 1 else "") for (role, alarm), n in sorted(total.items()))


def _finished(runs: list[RunData]) -> list[RunData]:
    return [r for r in runs if r.status == "done"]


def table1(g: GridData) -> list[dict]:
    """Rows per setting: its control first, then each method, in grid order."""
    bases = {g.key(r, "setting"): r for r in g.done("base")}
    groups = [*g.groups("control").items(), *g.groups("run").items()]
    rows = []
    for setting in dict.fromkeys(g.key(r, "setting") for r in g.runs):
        base = bases.get(setting)
        sa = Spread.of(c.acc("peak") for c in g.done("control") if g.key(c, "setting") == setting)
        for (s, method), cell_runs in groups:
            if s != setting:
                continue
            runs_ = _finished(cell_runs)
            resid = [r.acc("peak") - c.acc("peak") for r in runs_ if r.kind == "run"
                     for c in [g.control_for(r)] if c and r.acc("peak") is not None and c.acc("peak") is not None]
            rows.append({"setting": setting, "method": method, "kind": cell_runs[0].kind, "runs": runs_,
                         "cells": len(cell_runs), "routing": runs_[0].routing if runs_ else "",
                         "base": Spread.of([base.acc("final")] if base else []), "sa_rl": sa,
                         "workflow_base": Spread.of(r.acc("base") for r in runs_),
                         "peak": Spread.of(r.acc("peak") for r in runs_),
                         "peak_step": Spread.of(r.acc("peak_step") for r in runs_),
                         "final": Spread.of(r.acc("final") for r in runs_),
                         "residual": Spread.of(resid),
                         "cliffs": (sum(bool(r.cliff) for r in runs_), sum(r.cliff is not None for r in runs_)),
                         "fall": Spread.of(r.acc("fall") for r in runs_),
                         "fall_step": Spread.of(r.acc("fall_step") for r in runs_ if r.cliff),
                         "margin": runs_[0].cliff_margin if runs_ else CLIFF_MARGIN,
                         "alarms": _alarm_text(runs_)})
    return rows


def table2(g: GridData) -> list[dict]:
    """Rows per (cell, role or policy): Spreads of the three ratios and of the χ² peak step; per setting,
    the control first."""
    rows = []
    groups = [("control", k, v) for k, v in g.groups("control").items()] + \
             [("run", k, v) for k, v in g.groups("run").items()]
    for setting_ in dict.fromkeys(g.key(r, "setting") for r in g.runs):
        for kind, (setting, method), cell_runs in groups:
            if setting != setting_:
                continue
            runs_ = _finished(cell_runs)
            entities: dict[tuple[str, str], None] = {}
            for r in runs_:
                for group in ("roles", "policies"):
                    for ent in (r.summary.get("table2") or {}).get(group, {}):
                        entities.setdefault((group, ent), None)
            for group, ent in entities:
                stats = [s for r in runs_ if (s := (r.summary.get("table2") or {}).get(group, {}).get(ent))]
                row = {"setting": setting, "method": method, "kind": kind, "runs": runs_,
                       "entity": f"{'role' if group == 'roles' else 'policy'} {ent}",
                       "chi2_step": Spread.of(s.get("chi2_peak_step") for s in stats),
                       # runs whose χ² was logged but never reached its floor: no ratio to average
                       "not_measurable": sum((s.get(RATIOS["chi2"]) or {}).get("first") is not None
                                             and (s.get(RATIOS["chi2"]) or {}).get("ratio") is None for s in stats)}
                for short, metric in RATIOS.items():
                    row[short] = Spread.of((s.get(metric) or {}).get("ratio") for s in stats)
                rows.append(row)
    return rows


def fig2(g: GridData) -> list[dict]:
    """Per cell: peak minus its own step-0 accuracy (the base model running the workflow)."""
    out = []
    for (s, m), cell_runs in g.groups("run").items():
        runs_ = _finished(cell_runs)
        if runs_:
            out.append({"setting": s, "method": m, "routing": runs_[0].routing,
                        "delta": Spread.of(r.acc("peak") - r.acc("base") for r in runs_
                                           if r.acc("peak") is not None and r.acc("base") is not None)})
    return out


def _matched(g: GridData) -> dict[tuple, dict[str, list[RunData]]]:
    """(setting, method without the routing axes) -> routing -> finished runs."""
    out: dict[tuple, dict[str, list[RunData]]] = {}
    for r in g.done("run"):
        key = (g.key(r, "setting"), g.key(r, "method", blank=g.routing_axes))
        out.setdefault(key, {}).setdefault(r.routing, []).append(r)
    return out


def fig3(g: GridData) -> list[dict]:
    """Isolated- vs Shared-Policy peak accuracy on cells that differ only in routing."""
    return [{"setting": s, "method": m, "ip": Spread.of(r.acc("peak") for r in by["isolated"]),
             "sp": Spread.of(r.acc("peak") for r in by["shared"])}
            for (s, m), by in _matched(g).items() if "isolated" in by and "shared" in by]


def fig5(g: GridData) -> list[dict]:
    """Per matched cell and routing: the three instability amplitudes."""
    return [{"setting": s, "method": m, "routing": routing,
             **{stat: Spread.of(r.amplitude(stat) for r in runs_) for stat in AMPLITUDES}}
            for (s, m), by in _matched(g).items() for routing, runs_ in sorted(by.items())]


def per_run(g: GridData) -> list[dict]:
    """One flat row per cell (every seed separately): the CSV a spreadsheet or pandas re-aggregates."""
    rows = []
    for r in g.runs:
        c = g.control_for(r) if r.kind == "run" else None
        resid = (r.acc("peak") - c.acc("peak")) if c and r.acc("peak") is not None and c.acc("peak") is not None else None
        rows.append({**{a["name"]: r.labels.get(a["name"], "") for a in g.axes}, "cell": r.name, "kind": r.kind,
                     "status": r.status, "ip_sp": {"isolated": "IP", "shared": "SP"}.get(r.routing, r.routing),
                     **{k: r.acc(k) for k in ("base", "peak", "peak_step", "final", "final_step", "cliff", "fall",
                                              "fall_from_step", "fall_step")},
                     "cliff_flag": r.cliff, "residual_vs_control": resid,
                     **{stat: r.amplitude(stat) for stat in AMPLITUDES},
                     "alarms": _alarm_text([r]), "error": r.error or ""})
    return rows
