"""Build the self-contained HTML run report: header, Fig. 4- and Fig. 6-style plots, alarms."""
from __future__ import annotations

import base64
import hashlib
import math
from datetime import datetime, timezone
from html import escape
from importlib.resources import files
from pathlib import Path

from rolecall.diagnostics.alarms import ALARMS
from rolecall.diagnostics.summary import read_sittings, summarize
from rolecall.report.load import Run, load_run, normalise, run_names
from rolecall.report.svg import DASHES, PALETTE, Chart, Mark, Rule, Series, key_html, render, timeline
from rolecall.rundir.sitting import describe

CONTROL_COLOR = "#555555"
KNOWN_ALARMS = list(ALARMS)
Z_95 = 1.96  # validation points carry ± this many standard errors (a 95% interval)
DIAGNOSTICS = [("chi2_token", "token χ²"), ("training_ppl", "training perplexity"), ("grad_norm", "grad norm")]


def e(s) -> str:
    return escape(str(s), quote=True)


def write_report(run_dirs: list[Path], out: Path, *, control: Path | None = None, title: str | None = None) -> Path:
    """Read the run directories (and an optional single-agent control run) and write one HTML file."""
    if not run_dirs:
        raise ValueError("write_report needs at least one run directory")
    runs = [load_run(p, name) for p, name in zip(run_dirs, run_names(run_dirs))]
    ctrl = load_run(control, "SA-RL control") if control is not None else None
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(build_page(runs, ctrl, title=title), encoding="utf-8")
    return out


def ema(ys: list[float]) -> list[float]:
    """Trailing exponential average over the finite values (a window of ~1/20 of the run); NaN stays NaN."""
    k = max(2, len(ys) // 20)
    a, s, out = 2 / (k + 1), None, []
    for y in ys:
        if math.isfinite(y):
            s = y if s is None else (1 - a) * s + a * y
            out.append(s)
        else:
            out.append(math.nan)
    return out


def accuracy_error(run: Run, xs: list[int], ys: list[float]) -> dict:
    """Error bars of ± Z_95·se around each validation point that logged `val/accuracy_se` (cut to
    [0, 1], where an accuracy lives) and the ± in its hover read-out; nothing for a run without it."""
    se_at = dict(zip(*run.series("val/accuracy_se")))
    half = [Z_95 * se_at.get(x, math.nan) if math.isfinite(y) else math.nan for x, y in zip(xs, ys)]
    if not any(math.isfinite(h) for h in half):
        return {}
    ok = [math.isfinite(h) for h in half]  # NaN stays NaN (min/max would turn it into a bound)
    return {"bars": ([max(0.0, y - h) if k else math.nan for y, h, k in zip(ys, half, ok)],
                     [min(1.0, y + h) if k else math.nan for y, h, k in zip(ys, half, ok)]),
            "notes": [f"± {h:.3f} ({Z_95:g}·se)" if k else "" for h, k in zip(half, ok)]}


class Page:
    """Charts share one step axis and one colour per run (per role when there is one run)."""

    def __init__(self, runs: list[Run], control: Run | None) -> None:
        self.runs, self.control = runs, control
        self.roles = list(dict.fromkeys(r for run in runs for r in run.roles))
        steps = [run.last_step for run in runs] + ([control.last_step] if control else [])
        self.xdomain = (0.0, float(max(1, *steps)))
        self._ids = 0

    def chart(self, c: Chart) -> str:
        self._ids += 1
        return render(c, f"chart{self._ids}")

    def run_color(self, i: int) -> str:
        return PALETTE[i % len(PALETTE)]

    def role_style(self, i_run: int, role: str) -> tuple[str, str, str]:
        """(colour, dash, label) of one run's role line."""
        j = self.roles.index(role)
        if len(self.runs) == 1:
            return PALETTE[j % len(PALETTE)], "", role
        return self.run_color(i_run), DASHES[j % len(DASHES)], f"{self.runs[i_run].name} · {role}"

    def alarm_rules(self) -> list[Rule]:
        """A dotted vertical line at each alarm (in its run's colour when runs are overlaid); the first carries the legend."""
        rules = []
        for i, run in enumerate(self.runs):
            for a in run.alarms:
                color = self.run_color(i) if len(self.runs) > 1 else "#555"  # one run: colours mean roles
                rules.append(Rule(a["step"], f"step {a['step']}: {a.get('alarm')} — {a.get('message', '')}",
                                  color, dash="1 3", vertical=True, key=""))
        if rules:
            rules[0].key = "alarm (see Alarms)"
        return rules

    # -- sections ---------------------------------------------------------------------------
    def success(self) -> str:
        train, val = [], []
        rules: list[Rule] = []
        for i, run in enumerate(self.runs):
            color = self.run_color(i)
            xs, ys = run.series("reward/mean")
            smooth = len(ys) >= 30
            train.append(Series(run.name, color, xs, ema(ys) if smooth else ys, hover=not smooth))
            if smooth:
                train.append(Series(f"{run.name} (raw)", color, xs, ys, opacity=0.25, width=1.0, legend=False, markers=False))
            vx, vy = run.series("val/accuracy")
            val.append(Series(run.name, color, vx, vy, **accuracy_error(run, vx, vy)))
            base = next((y for x, y in zip(vx, vy) if x == 0 and math.isfinite(y)), None)
            if base is not None:
                label = "base (step-0 validation)" if len(self.runs) == 1 else f"base · {run.name}"
                rules.append(Rule(base, label, color))
        if self.control:
            cx, cy = self.control.series("val/accuracy")
            val.append(Series("SA-RL control", CONTROL_COLOR, cx, cy, dash="5 3", **accuracy_error(self.control, cx, cy)))
        note = "EMA-smoothed, raw faint" if any(not s.legend for s in train) else ""
        return (self.chart(Chart("Training success rate", train, xdomain=self.xdomain, ylabel="reward/mean", note=note))
                + self.chart(Chart("Validation accuracy", val, rules + self.alarm_rules(), xdomain=self.xdomain,
                                   ylabel="val/accuracy")))

    def diagnostics(self) -> str:
        html, keys = [], {}
        for metric, label in DIAGNOSTICS:
            series = []
            for i, run in enumerate(self.runs):
                for role in run.roles:
                    xs, ys = run.series(f"role/{role}/{metric}")
                    if any(math.isfinite(y) for y in ys):
                        color, dash, name = self.role_style(i, role)
                        series.append(Series(name, color, xs, normalise(ys), dash=dash))
                        keys[name] = (name, color, dash)
            rules = [Rule(1.0, "first value", "#999", dash="3 3", key="")] + self.alarm_rules()
            html.append(self.chart(Chart(label, series, rules, xdomain=self.xdomain, width=373, plot_h=190,
                                         ylabel=f"{metric} / first", note="÷ first value", legend=False)))
        if any(run.alarms for run in self.runs):
            keys["alarm"] = ("alarm step" + (" (dotted, run colour)" if len(self.runs) > 1 else ""), "#555", "1 3")
        return key_html(list(keys.values())) + '<div class="grid three">' + "".join(html) + "</div>"

    def lengths(self) -> str:
        html = []
        for role in self.roles:
            series = []
            for i, run in enumerate(self.runs):
                color = self.run_color(i) if len(self.runs) > 1 else self.role_style(0, role)[0]
                prefix = f"{run.name} · " if len(self.runs) > 1 else ""
                xs, p50 = run.series(f"role/{role}/len_p50")
                if not any(math.isfinite(v) for v in p50):
                    xs, mean = run.series(f"role/{role}/completion_len")
                    if any(math.isfinite(v) for v in mean):
                        series.append(Series(f"{prefix}mean", color, xs, mean))
                    continue
                by_step = dict(zip(*run.series(f"role/{role}/len_p95")))
                p95 = [by_step.get(x, math.nan) for x in xs]
                series.append(Series(f"{prefix}p50 (band to p95)", color, xs, p50, band=(p50, p95)))
                series.append(Series(f"{prefix}p95", color, xs, p95, dash="3 2", width=1.0, legend=False))
            if series:
                html.append(self.chart(Chart(f"{role}: completion length", series, xdomain=self.xdomain, width=373,
                                             plot_h=170, ylabel="tokens")))
        return "".join(html) or '<p class="empty">No completion-length metrics were logged.</p>'

    def alarms(self) -> str:
        marks, rows = [], []
        for i, run in enumerate(self.runs):
            for a in run.alarms:
                kind, role, msg = str(a.get("alarm", "?")), a.get("role"), str(a.get("message", ""))
                who = f"{run.name} · " if len(self.runs) > 1 else ""
                where = f" [{role}]" if role else ""
                marks.append(Mark(a["step"], kind, self.run_color(i), f"step {a['step']} · {who}{kind}{where}: {msg}", shape=i))
                rows.append((a["step"], run.name, kind, role, msg, self.run_color(i)))
        lanes = KNOWN_ALARMS + sorted({m.lane for m in marks} - set(KNOWN_ALARMS))
        legend = [(run.name, self.run_color(i), i) for i, run in enumerate(self.runs)] if len(self.runs) > 1 else []
        html = [timeline("Alarm timeline", lanes, marks, self.xdomain, "alarms", legend=legend)]
        if rows:
            html.append('<table class="alarms"><thead><tr><th>step</th><th>run</th><th>alarm</th><th>role</th>'
                        '<th>message</th></tr></thead><tbody>')
            for step, name, kind, role, msg, color in sorted(rows, key=lambda r: (r[0], r[1])):
                html.append(f'<tr><td class="num">{step}</td><td><span class="swatch" style="background:{color}"></span>'
                            f'{e(name)}</td><td>{e(kind)}</td><td>{e(role or "—")}</td><td>{e(msg)}</td></tr>')
            html.append("</tbody></table>")
        else:
            html.append('<p class="empty">No alarms were raised.</p>')
        return "".join(html)

    def stats(self) -> str:
        """Per run, Table 2's first→peak ratios and Fig. 5's amplitudes per role then policy, and the accuracy line."""
        head = ("<tr><th>role / policy</th><th>χ² first→peak</th><th>perplexity first→peak</th>"
                "<th>grad norm first→peak</th><th>χ² peak step</th><th>max χ²</th><th>max grad norm</th>"
                "<th>entropy collapse</th></tr>")
        html = []
        for i, run in enumerate(self.runs + ([self.control] if self.control else [])):
            color = self.run_color(i) if i < len(self.runs) else CONTROL_COLOR
            name = run.name if run is not self.control else "SA-RL control"
            s = summarize(run.rows)
            acc = s["accuracy"]
            line = (f"base {_fmt(acc['base'], '.3f')} · peak {_fmt(acc['peak'], '.3f')} @ step {_fmt(acc['peak_step'])}"
                    f" · final {_fmt(acc['final'], '.3f')} @ step {_fmt(acc['final_step'])}"
                    + (f" · deepest fall {_fmt(acc['fall'], '.3f')} (step {acc['fall_from_step']} → {acc['fall_step']})"
                       if acc.get("fall") else " · no fall after a peak")) if acc["peak"] is not None \
                else "no validation logged"
            html.append(f'<p class="caption"><span class="swatch" style="background:{color}"></span>'
                        f"<strong>{e(name)}</strong> · val/accuracy: {line}</p>")
            body = []
            for group, kind in (("roles", "role"), ("policies", "policy")):
                for ent, t2 in s["table2"][group].items():
                    amp = s["amplitude"][group][ent]
                    body.append(f"<tr><td>{kind} {e(ent)}</td>"
                                + "".join(_ratio_cell(t2[m]) for m in ("chi2_token", "training_ppl", "grad_norm"))
                                + "".join(f'<td class="num">{_fmt(v)}</td>' for v in (
                                    t2["chi2_peak_step"], amp["max_chi2"], amp["max_grad_norm"], amp["entropy_collapse"]))
                                + "</tr>")
            html.append(f'<table class="stats" style="margin-bottom:14px"><thead>{head}</thead>'
                        f'<tbody>{"".join(body)}</tbody></table>' if body
                        else '<p class="empty">No per-role or per-policy metrics were logged.</p>')
        return "".join(html)

    def summary(self) -> str:
        head = ("<tr><th>run</th><th>workflow</th><th>routing</th><th>roles</th><th>steps</th><th>base val</th>"
                "<th>peak val (step)</th><th>final val</th><th>alarms</th><th>wall time</th><th>code</th></tr>")
        body = []
        for i, run in enumerate(self.runs + ([self.control] if self.control else [])):
            color = self.run_color(i) if i < len(self.runs) else CONTROL_COLOR
            vx, vy = run.series("val/accuracy")
            pts = [(x, y) for x, y in zip(vx, vy) if math.isfinite(y)]
            base = next((f"{y:.3f}" for x, y in pts if x == 0), "—")
            peak = max(pts, key=lambda p: p[1], default=None)
            _, elapsed = run.series("time/elapsed_s")
            wall = max((t for t in elapsed if math.isfinite(t)), default=math.nan)
            name = run.name if run is not self.control else f"SA-RL control ({run.path.name})"
            body.append(
                f'<tr><td><span class="swatch" style="background:{color}"></span>{e(name)}</td><td>{e(run.workflow)}</td>'
                f'<td>{e(run.routing)}</td><td>{e(", ".join(run.roles) or "—")}</td><td class="num">{run.last_step}</td>'
                f'<td class="num">{base}</td><td class="num">{f"{peak[1]:.3f} ({peak[0]})" if peak else "—"}</td>'
                f'<td class="num">{f"{pts[-1][1]:.3f}" if pts else "—"}</td><td class="num">{len(run.alarms)}</td>'
                f'<td class="num">{_duration(wall)}</td><td>{e(_code(run))}</td></tr>')
        return f'<table class="summary"><thead>{head}</thead><tbody>{"".join(body)}</tbody></table>'


def _code(run: Run) -> str:
    """Which code wrote the run, from its sittings (one each start or resume); a dash for a run
    from before rolecall recorded them."""
    return describe(read_sittings(run.path)) or "—"


def _fmt(v, spec: str = ".3g") -> str:
    """A number for a table cell; None (not logged) is a dash."""
    if v is None:
        return "—"
    if isinstance(v, int):
        return str(v)
    return f"{v:,.0f}" if abs(v) >= 1000 and spec == ".3g" else format(v, spec)


def _ratio_cell(m: dict) -> str:
    """peak over the first measurable value (at or above the statistic's floor), the values and
    steps on hover; a statistic that never reached its floor has no ratio."""
    if m["first"] is None:
        return '<td class="num">—</td>'
    base = f" (first ≥ {_fmt(m['floor'])}: {_fmt(m['base'])} at step {m['base_step']})" \
        if m.get("base") is not None and m["base"] != m["first"] else ""
    hover = e(f"first {_fmt(m['first'])}{base} → peak {_fmt(m['peak'])} at step {m['peak_step']}"
              + (f"; {m['ratio_note']}" if "ratio_note" in m else ""))
    text = f"{m['ratio']:.2f}×" if m["ratio"] is not None else "not measurable"
    return f'<td class="num" title="{hover}">{text}</td>'


def _duration(s: float) -> str:
    if not math.isfinite(s):
        return "—"
    h, m = divmod(int(s) // 60, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{int(s) % 60:02d}s"


def build_page(runs: list[Run], control: Run | None = None, *, title: str | None = None) -> str:
    page = Page(runs, control)
    title = title or "rolecall report: " + " vs ".join(r.name for r in runs)
    css = files("rolecall.report").joinpath("style.css").read_text(encoding="utf-8")
    js = files("rolecall.report").joinpath("plot.js").read_text(encoding="utf-8")
    # Only this exact script may run: nothing is fetched, and an injected <script> would be refused.
    sha = base64.b64encode(hashlib.sha256(js.encode()).digest()).decode()
    csp = f"default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src 'sha256-{sha}'"
    warnings = [w for r in runs + ([control] if control else []) for w in r.warnings]
    warn_html = ('<div class="warnings"><strong>Warnings</strong><ul>'
                 + "".join(f"<li>{e(w)}</li>" for w in warnings) + "</ul></div>") if warnings else ""
    meta = (f"{len(runs)} run{'s' * (len(runs) > 1)} · workflow {e(' / '.join(dict.fromkeys(r.workflow for r in runs)))}"
            f" · routing {e(' / '.join(dict.fromkeys(r.routing for r in runs)))} · {max(r.last_step for r in runs)} steps"
            f" · written {datetime.now(timezone.utc).astimezone().strftime('%Y-%m-%d %H:%M %Z')}")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{csp}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{e(title)}</title><style>{css}</style></head>
<body><main>
<header><h1>{e(title)}</h1><p class="meta">{meta}</p>{page.summary()}</header>
{warn_html}
<section><h2>Success and accuracy</h2>
<p class="caption">Training success rate (mean final reward per step) and validation accuracy per checkpoint,
with error bars of ± {Z_95:g} standard errors (val/accuracy_se) where the run logged them;
dashed: the base model (step-0 validation){"; grey: the single-agent RL control" if control else ""}.</p>
<div class="grid two">{page.success()}</div></section>
<section><h2>Per-role training diagnostics</h2>
<p class="caption">Each role's token χ², training perplexity and adapter grad norm, divided by its first logged value
(paper Fig. 6): a multi-slot role climbing while the others stay near 1 is gradient amplification.</p>
{page.diagnostics()}</section>
<section><h2>Paper statistics</h2>
<p class="caption">Per role, then per policy (the statistics of each run's summary.json): peak-over-first ratios of token χ²,
training perplexity and grad norm and the step of the χ² peak (paper Table 2), each peak over the first value at or
above the statistic's floor (χ² 0.01, grad norm 1e-6: below it a value is noise around zero); the run's maximum χ² and
grad norm and its entropy collapse, first entropy minus the minimum (paper Fig. 5). Hover a ratio for its values; a
statistic that never reached its floor is "not measurable". Validation: base (step 0), peak, final, and the deepest
fall below an earlier peak.</p>
{page.stats()}</section>
<section><h2>Completion length per role</h2>
<p class="caption">Median completion length in tokens, shaded up to the 95th percentile.</p>
<div class="grid three">{page.lengths()}</div></section>
<section><h2>Alarms</h2>{page.alarms()}</section>
<footer>rolecall report · {e(", ".join(str(r.path) for r in runs))}</footer>
</main><div id="tip" hidden></div><script>{js}</script></body></html>
"""
