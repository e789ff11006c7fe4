"""Write the grid report: report.md (Markdown tables), CSV files, and one self-contained report.html.

Accuracies are shown in percent and residuals in percentage points, as the paper's Table 1;
a statistic over several seeds reads `mean ± sd (min–max)`. The CSV files keep raw fractions:
runs.csv has one row per cell (every seed apart), the others one row per table row with
`_mean`, `_sd`, `_min`, `_max` and `_n` columns per statistic.
"""
from __future__ import annotations

import csv
from datetime import datetime, timezone
from html import escape
from importlib.resources import files
from pathlib import Path

from rolecall.grid import matching, tables
from rolecall.grid.charts import bars, scatter
from rolecall.grid.progress import accuracy_line
from rolecall.grid.tables import GridData, Spread
from rolecall.report.svg import PALETTE, Chart, Series, key_html
from rolecall.report.svg import render as render_chart

ROUTING = {"isolated": ("IP", PALETTE[0]), "shared": ("SP", PALETTE[1]), "custom": ("custom", PALETTE[2]),
           "?": ("?", "#7f7f7f"), "": ("", "#7f7f7f")}
CONTROL = "SA-RL control"
DASH = "—"


# -- numbers -------------------------------------------------------------------------------------
def spread(s: Spread, scale: float = 1.0, spec: str = ".1f", sign: bool = False, suffix: str = "") -> str:
    """`53.2` for one value, `53.2 ± 2.1 (51.0–55.0)` for several, a dash for none."""
    if not s.n:
        return DASH

    def f(v: float) -> str:
        return format(v * scale, ("+" if sign else "") + spec) + suffix

    if s.n == 1:
        return f(s.mean)
    dash = " to " if s.lo < 0 else "–"  # "-10.1 to -6.8" reads better than "-10.1–-6.8"
    return f"{f(s.mean)} ± {format(s.sd * scale, spec)} ({f(s.lo)}{dash}{f(s.hi)})"


def pct(s: Spread) -> str:
    return spread(s, 100)


def steps(s: Spread) -> str:
    return spread(s, spec=".0f")


def cliffs(row: dict) -> str:
    """Whether the runs fell off a cliff (a fall below an earlier peak of at least the margin),
    with the deepest fall in points and, for the runs that did, the step it reached."""
    k, n = row["cliffs"]
    if n == 0:
        return DASH
    head = ("yes" if k else "no") if n == 1 else f"{k}/{n} seeds"
    fall = f"fall {spread(row['fall'], 100)} pp" if row["fall"].n else ""
    at = f" at step {steps(row['fall_step'])}" if k and row["fall_step"].n else ""
    return f"{head} (margin {100 * row['margin']:.0f} pp; {fall}{at})" if fall else head


# -- rows ----------------------------------------------------------------------------------------
def _method_cols(g: GridData) -> list[str]:
    return g.names("method") or ["method"]


def _method_cells(g: GridData, row: dict) -> list[str]:
    if row["kind"] == "control":
        return [CONTROL] + [""] * (len(_method_cols(g)) - 1)
    return list(row["method"]) or ["run"]


def table1_rows(g: GridData) -> tuple[list[str], list[list[str]]]:
    head = [*g.names("setting"), *_method_cols(g), "IP/SP", "seeds", "base", "SA-RL", "step 0", "peak",
            "peak step", "final", "Δ vs SA-RL (pp)", "cliff", "alarms (role: alarm)"]
    body = [[*row["setting"], *_method_cells(g, row), ROUTING[row["routing"]][0] if row["kind"] == "run" else DASH,
             f"{len(row['runs'])}/{row['cells']}", pct(row["base"]), pct(row["sa_rl"]), pct(row["workflow_base"]),
             pct(row["peak"]), steps(row["peak_step"]), pct(row["final"]),
             spread(row["residual"], 100, sign=True) if row["kind"] == "run" else DASH,
             cliffs(row), row["alarms"] or DASH] for row in tables.table1(g)]
    return head, body


def table2_rows(g: GridData) -> tuple[list[str], list[list[str]]]:
    head = [*g.names("setting"), *_method_cols(g), "role / policy", "χ² first→peak", "perplexity first→peak",
            "grad norm first→peak", "χ² peak step"]
    body = []
    for row in tables.table2(g):
        chi2 = spread(row["chi2"], spec=".2f", suffix="×")
        if row["not_measurable"]:  # seeds whose χ² never reached its floor have no ratio
            chi2 = "not measurable" if not row["chi2"].n else f"{chi2}; not measurable in {row['not_measurable']}"
        body.append([*row["setting"], *_method_cells(g, row), row["entity"], chi2,
                     spread(row["ppl"], spec=".2f", suffix="×"), spread(row["grad"], spec=".2f", suffix="×"),
                     steps(row["chi2_step"])])
    return head, body


def _axis_cols(g: GridData, drop_routing: bool = False) -> list[str]:
    """Setting then method axis names (the routing axes left out where IP and SP are paired)."""
    return [*g.names("setting"), *(a for a in g.names("method") if not (drop_routing and a in g.routing_axes))]


def _axis_cells(g: GridData, row: dict, drop_routing: bool = False) -> list[str]:
    method = [v for a, v in zip(g.names("method"), row["method"]) if not (drop_routing and a in g.routing_axes)]
    return [*row["setting"], *method]


def _label(g: GridData, row: dict, drop_routing: bool = False) -> str:
    """A chart row's name: its labels, e.g. `math · 1.7B · voting · ip`."""
    return " · ".join(x for x in _axis_cells(g, row, drop_routing) if x) or "run"


def figure_rows(g: GridData) -> dict[str, tuple[list[str], list[list[str]]]]:
    fig2 = ([*_axis_cols(g), "IP/SP", "peak − step 0 (pp)"],
            [[*_axis_cells(g, r), ROUTING[r["routing"]][0], spread(r["delta"], 100, sign=True)] for r in tables.fig2(g)])
    fig3 = ([*_axis_cols(g, True), "IP peak", "SP peak", "IP − SP (pp)"],
            [[*_axis_cells(g, r, True), pct(r["ip"]), pct(r["sp"]),
              f"{100 * (r['ip'].mean - r['sp'].mean):+.1f}" if r["ip"].n and r["sp"].n else DASH]
             for r in tables.fig3(g)])
    fig5 = ([*_axis_cols(g, True), "IP/SP", "max χ²", "max grad norm", "entropy collapse"],
            [[*_axis_cells(g, r, True), ROUTING[r["routing"]][0], *(spread(r[k], spec=".3g") for k in tables.AMPLITUDES)]
             for r in tables.fig5(g)])
    return {"fig2": fig2, "fig3": fig3, "fig5": fig5}


def paired(p: matching.Paired, reach: Spread | None = None) -> str:
    """`+4.0 [−2.1, +10.1] (3 seeds)` in points; one seed: no interval. With `reach` below the
    whole run, how far into the cell's own run the pair read (the control ran out first)."""
    if not p.n:
        return DASH
    if p.ci95 is None:
        text = f"{100 * p.mean:+.1f} (1 seed, no interval)"
    else:
        lo, hi = p.ci95
        text = f"{100 * p.mean:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}] ({p.n} seeds)"
    if reach is not None and reach.n and reach.mean < 0.995:
        text += f", the cell read at {100 * reach.mean:.0f} % of its run"
    return text


def matched_rows(g: GridData, controls: GridData | None = None) -> tuple[list[str], list[list[str]]]:
    """The cells against the control; with `controls`, equal tokens and equal time against those."""
    head = [*_axis_cols(g), "IP/SP", "vs control: equal problems", "equal generated tokens", "equal wall time",
            "peak − step 0", "final − step 0"]
    body = [[*_axis_cells(g, r), ROUTING.get(r["routing"], (r["routing"],))[0],
             *(paired(r[m], r["reach"][m]) for m in matching.MATCHINGS),
             paired(r["peak_vs_own_base"]), paired(r["final_vs_own_base"])]
            for r in matching.comparisons(g, controls)]
    return head, body


def cell_rows(g: GridData) -> tuple[list[str], list[list[str]]]:
    return (["cell", "kind", "status", "validation / error"],
            [[r.name, r.kind, r.status, (r.error or "") if r.status == "failed" else accuracy_line(g.path / r.name)]
             for r in g.runs])


# -- Markdown and CSV ----------------------------------------------------------------------------
def markdown_table(head: list[str], body: list[list[str]]) -> str:
    def cell(x: str) -> str:
        return str(x).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(map(cell, head)) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(map(cell, r)) + " |" for r in body]
    return "\n".join(lines) + "\n" if body else "_no finished cells yet_\n"


SECTIONS = [
    ("Table 1: validation accuracy (%)", "table1",
     "Peak validation accuracy per cell; base = the setting's base-model evaluation (single agent, no training), "
     "SA-RL = the single-agent RL control's peak, step 0 = the untrained workflow; Δ vs SA-RL = peak minus the "
     "control's peak of the same seed; cliff = the validation accuracy fell at least the run's "
     "alarms.cliff_margin below an earlier peak (the deepest such fall, in points, and the step it reached)."),
    ("Against the single-agent control at matched cost", "matched",
     "Each cell minus the control of the same seed, in points: mean and 95 % t interval over the paired seeds. "
     "Each pair is read at the smaller of its two runs' totals of the matched cost (problems trained on, tokens "
     "generated by every role, training wall time), each run at its last validation within that budget; where the "
     "control's whole run cost less than the cell's, that budget is the control's, and the share of the cell's own "
     "run it covers is named (a short control compares the cell's early steps; `rolecall grid report DIR --controls "
     "LONGER_DIR` reads equal tokens and time against a longer control grid). The last two columns: the cell "
     "against its own untrained workflow (step 0)."),
    ("Table 2: per-role peak-over-first ratios", "table2",
     "Token χ², training perplexity and grad norm: peak over the first value at or above the statistic's floor "
     "(χ² 0.01, grad norm 1e-6; below it a value is noise around zero), per role and per policy; a statistic "
     "that never reached its floor is not measurable and has no ratio."),
    ("Figure 2: accuracy gain over the base model", "fig2", "Peak minus the run's own step-0 accuracy."),
    ("Figure 3: Isolated- vs Shared-Policy peak", "fig3", "Cells that differ only in routing."),
    ("Figure 5: training-side instability amplitude", "fig5",
     "Maximum token χ², maximum grad norm and entropy collapse (first minus minimum entropy), each the largest "
     "over the run's adapters."),
]


def all_tables(g: GridData, controls: GridData | None = None) -> dict[str, tuple[list[str], list[list[str]]]]:
    return {"table1": table1_rows(g), "matched": matched_rows(g, controls), "table2": table2_rows(g), **figure_rows(g),
            "cells": cell_rows(g)}


def markdown(g: GridData, tabs: dict, controls: GridData | None = None) -> str:
    parts = [f"# Grid report: {g.path}\n", _axes_line(g, controls) + "\n"]
    for title, key, caption in SECTIONS:
        parts += [f"## {title}\n", caption + "\n", markdown_table(*tabs[key])]
    parts += ["## Cells\n", markdown_table(*tabs["cells"])]
    return "\n".join(parts)


def _flat(g: GridData, row: dict) -> dict:
    out: dict = {}
    for k, v in row.items():
        if k == "setting":
            out.update(zip(g.names("setting"), v))
        elif k == "method":
            out.update(zip(_method_cols(g), _method_cells(g, row) if "kind" in row else v))
        elif isinstance(v, matching.Paired):  # before Spread, which it extends
            lo, hi = v.ci95 or (None, None)
            out.update({f"{k}_mean": v.mean, f"{k}_ci95_lo": lo, f"{k}_ci95_hi": hi, f"{k}_n": v.n})
        elif isinstance(v, Spread):
            out.update({f"{k}_mean": v.mean, f"{k}_sd": v.sd, f"{k}_min": v.lo, f"{k}_max": v.hi, f"{k}_n": v.n})
        elif k == "routing":  # the config's routing as IP/SP; a method axis may be called routing too
            out["ip_sp"] = ROUTING.get(v, (v,))[0]
        elif k == "cliffs":
            out.update({"cliff_runs": v[0], "cliff_of": v[1]})
        elif k == "reach":  # how far into each cell run its pair read, per matching
            out.update({f"{m}_reach_mean": r.mean for m, r in v.items()})
        elif k != "runs":
            out[k] = v
    return out


def write_csv(path: Path, rows: list[dict]) -> None:
    cols = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)


def write_csvs(g: GridData, out: Path, controls: GridData | None = None) -> list[Path]:
    data = {"runs": tables.per_run(g), "table1": [_flat(g, r) for r in tables.table1(g)],
            "table2": [_flat(g, r) for r in tables.table2(g)], "fig2": [_flat(g, r) for r in tables.fig2(g)],
            "fig3": [_flat(g, r) for r in tables.fig3(g)], "fig5": [_flat(g, r) for r in tables.fig5(g)],
            "matched": [_flat(g, r) for r in matching.comparisons(g, controls)]}
    paths = []
    for name, rows in data.items():
        write_csv(out / f"{name}.csv", rows)
        paths.append(out / f"{name}.csv")
    return paths


def _axes_line(g: GridData, controls: GridData | None = None) -> str:
    roles = {role: ", ".join(g.names(role)) for role in ("setting", "method", "seed")}
    counts = {s: sum(r.status == s for r in g.runs) for s in ("done", "failed", "started", "pending")}
    return (f"{len(g.runs)} cells ({', '.join(f'{n} {s}' for s, n in counts.items() if n)}); "
            f"setting axes: {roles['setting'] or 'none'}; method axes: {roles['method'] or 'none'}; "
            f"seed axis: {roles['seed'] or 'none'}"
            + (f"; equal generated tokens and equal wall time against the controls of {controls.path}"
               if controls is not None else ""))


# -- HTML ----------------------------------------------------------------------------------------
EXTRA_CSS = (".tables { overflow-x: auto; } .tables th, .tables td { word-break: normal; } "
             "td.num { white-space: nowrap; text-align: left; } "
             "td .range { color: var(--muted); font-size: 11px; } svg .bar { stroke: none; }")


def _html_cell(text: str) -> str:
    """`mean ± sd (min–max)`: the range goes on a second, smaller line."""
    text = str(text)
    if " ± " in text and text.endswith(")") and " (" in text:
        head, rng = text.rsplit(" (", 1)
        return f'<td class="num">{escape(head)}<br><span class="range">{escape(rng[:-1])}</span></td>'
    return f"<td>{escape(text)}</td>"


def html_table(head: list[str], body: list[list[str]]) -> str:
    if not body:
        return '<p class="empty">No finished cells yet.</p>'
    e = lambda s: escape(str(s), quote=True)  # noqa: E731
    rows = "".join("<tr>" + "".join(_html_cell(c) for c in r) + "</tr>" for r in body)
    return (f'<div class="tables"><table><thead><tr>{"".join(f"<th>{e(h)}</th>" for h in head)}</tr></thead>'
            f"<tbody>{rows}</tbody></table></div>")


def figures(g: GridData) -> dict[str, str]:
    f2 = [(_label(g, r),
           [(ROUTING[r["routing"]][0], *(None if v is None else 100 * v for v in (r["delta"].mean, r["delta"].lo, r["delta"].hi)),
             ROUTING[r["routing"]][1])]) for r in tables.fig2(g)]
    method = lambda r: " · ".join(v for a, v in zip(g.names("method"), r["method"])  # noqa: E731
                                  if v and a not in g.routing_axes) or "run"
    groups = list(dict.fromkeys(method(r) for r in tables.fig3(g)))
    colour = {m: PALETTE[i % len(PALETTE)] for i, m in enumerate(groups)}
    pts = [(100 * r["sp"].mean, 100 * r["ip"].mean, f"{_label(g, r, True)}: IP {pct(r['ip'])}, SP {pct(r['sp'])}",
            colour[method(r)])
           for r in tables.fig3(g) if r["ip"].n and r["sp"].n]
    f5_rows = tables.fig5(g)
    f5 = []
    for stat, label in zip(tables.AMPLITUDES, ("max token χ²", "max grad norm", "entropy collapse")):
        by_cell: dict[str, list] = {}
        for r in f5_rows:
            s = r[stat]
            by_cell.setdefault(_label(g, r, True), []).append(
                (ROUTING[r["routing"]][0], s.mean, s.lo, s.hi, ROUTING[r["routing"]][1]))
        f5.append(bars(label, list(by_cell.items()), label, f"fig5-{stat}", width=373))
    routings = {r["routing"] for r in tables.fig2(g)} | {r["routing"] for r in f5_rows}
    key = key_html([(ROUTING[k][0], ROUTING[k][1], "") for k in ROUTING if k in routings])
    return {"fig2": key + bars("Peak minus step-0 accuracy", f2, "percentage points", "fig2", fmt=lambda v: f"{v:+.1f}"),
            "fig3": key_html([(m, colour[m], "") for m in groups]) + scatter(
                "IP vs SP peak validation accuracy", pts, "Shared-Policy peak (%)", "Isolated-Policy peak (%)", "fig3"),
            "fig5": key + '<div class="grid three">' + "".join(f5) + "</div>"}


COST_LABELS = {"problems": "problems trained on", "generated_tokens": "tokens generated (every role)",
               "wall_seconds": "training seconds"}


def curve_figures(g: GridData, controls: GridData | None = None) -> str:
    """Per setting, validation accuracy against each matched cost: each cell's mean over seeds,
    shaded from its lowest to its highest seed; the control dashed (by tokens and by time, the
    longer `controls` where given)."""
    rows = matching.mean_curves(g)
    longer = matching.mean_curves(matching.with_controls(g, controls)) if controls is not None else rows
    out = []
    for setting in dict.fromkeys(r["setting"] for r in rows):
        name = " · ".join(x for x in setting if x)
        for m in matching.MATCHINGS:
            source = longer if m in matching.LONGER_CONTROL_MATCHINGS else rows
            control = CONTROL + (f" · {controls.path.name}" if source is not rows else "")
            cells = [r for r in source if r["setting"] == setting]
            series = [Series(f"{control if r['kind'] == 'control' else ' · '.join(x for x in r['method'] if x)} "
                             f"({r['seeds']} seed{'s' * (r['seeds'] != 1)})", PALETTE[i % len(PALETTE)],
                             r["by"][m][0], [100 * y for y in r["by"][m][1]],
                             dash="7 3" if r["kind"] == "control" else "",
                             band=([100 * y for y in r["by"][m][2]], [100 * y for y in r["by"][m][3]]))
                      for i, r in enumerate(cells)]
            chart = Chart(f"validation accuracy by {COST_LABELS[m]}" + (f" · {name}" if name else ""), series,
                          xlabel=COST_LABELS[m], ylabel="accuracy (%)", width=373)
            out.append(render_chart(chart, f"curve-{len(out)}", hover_data=False))
    return f'<div class="grid three">{"".join(out)}</div>' if out else ""


def html(g: GridData, tabs: dict, title: str | None = None, controls: GridData | None = None) -> str:
    title = title or f"rolecall grid report: {g.path.resolve().name}"
    css = files("rolecall.report").joinpath("style.css").read_text(encoding="utf-8") + EXTRA_CSS
    figs = {**figures(g), "matched": curve_figures(g, controls)}
    e = lambda s: escape(str(s), quote=True)  # noqa: E731
    body = []
    for heading, key, caption in SECTIONS:
        fig = figs.get(key, "")
        body.append(f'<section><h2>{e(heading)}</h2><p class="caption">{e(caption)}</p>{fig}{html_table(*tabs[key])}</section>')
    written = datetime.now(timezone.utc).astimezone().strftime("%Y-%m-%d %H:%M %Z")
    # Nothing runs and nothing is fetched: the page is tables and inline SVG.
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{e(title)}</title><style>{css}</style></head>
<body data-ready="1"><main>
<header><h1>{e(title)}</h1><p class="meta">{e(_axes_line(g, controls))} · written {e(written)}</p></header>
{"".join(body)}
<section><h2>Cells</h2>{html_table(*tabs["cells"])}</section>
<footer>rolecall grid report · {e(g.path)}</footer>
</main></body></html>
"""


def write_report(grid_dir: str | Path, out: str | Path | None = None, title: str | None = None,
                 controls: str | Path | None = None) -> list[Path]:
    """Read the grid directory and write report.md, report.html and the CSV files into `out` (default
    DIR/report). `controls`: another grid directory whose single-agent controls ran longer (see
    `matching.with_controls`); equal tokens and equal time are then read against those."""
    g = tables.load(grid_dir)
    longer = tables.load(controls) if controls is not None else None
    out = Path(out) if out is not None else Path(grid_dir) / "report"
    out.mkdir(parents=True, exist_ok=True)
    tabs = all_tables(g, longer)
    (out / "report.md").write_text(markdown(g, tabs, longer), encoding="utf-8")
    (out / "report.html").write_text(html(g, tabs, title, longer), encoding="utf-8")
    return [out / "report.md", out / "report.html", *write_csvs(g, out, longer)]
