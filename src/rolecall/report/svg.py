"""Dependency-free SVG line charts: axes, ticks, legend, NaN gaps, bands, error bars, reference lines.

Drawn server-side so the page shows its plots with JavaScript off; plot.js only adds the
hover read-out, from the JSON each chart carries next to its SVG.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from html import escape

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
           "#7f7f7f", "#bcbd22"]
DASHES = ["", "7 3", "2 3", "9 3 2 3", "4 2 1 2 1 2"]
CHAR_W = 6.3  # rough width of one 11px sans-serif character, for legend layout


@dataclass
class Series:
    label: str
    color: str
    xs: list[float]
    ys: list[float]
    dash: str = ""
    band: tuple[list[float], list[float]] | None = None  # (low, high) at the same xs, drawn shaded
    bars: tuple[list[float], list[float]] | None = None  # (low, high) at the same xs, drawn as error bars
    notes: list[str] | None = None  # per point, after its value in the hover read-out ("" for none)
    markers: bool | None = None  # None: markers when the series is sparse (e.g. validation checkpoints)
    opacity: float = 1.0
    width: float = 1.8
    legend: bool = True
    hover: bool = True


@dataclass
class Rule:
    """A reference line: horizontal at y (base accuracy, 1.0 for normalised) or vertical at x (an alarm)."""
    at: float
    label: str
    color: str
    dash: str = "6 4"
    vertical: bool = False
    key: str | None = None  # legend text: None = the label, "" = not in the legend


@dataclass
class Chart:
    title: str
    series: list[Series]
    rules: list[Rule] = field(default_factory=list)
    xdomain: tuple[float, float] | None = None
    ylabel: str = ""
    xlabel: str = "step"
    width: int = 560
    plot_h: int = 210
    note: str = ""
    legend: bool = True  # False when the section draws one shared legend (see key_html)


def nice_step(span: float, n: int = 5) -> float:
    raw = span / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)


def axis(lo: float, hi: float, n: int = 5, integer: bool = False) -> tuple[float, float, list[float]]:
    """A padded domain rounded out to tick multiples, and its ticks."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        lo, hi = 0.0, 1.0
    if hi - lo < 1e-12 * max(1.0, abs(hi)):
        pad = abs(hi) * 0.1 or 1.0
        lo, hi = lo - pad, hi + pad
    step = nice_step(hi - lo, n)
    if integer:
        step = max(1.0, round(step))
    lo, hi = math.floor(lo / step + 1e-9) * step, math.ceil(hi / step - 1e-9) * step
    ticks = [lo + i * step for i in range(int(round((hi - lo) / step)) + 1)]
    return lo, hi, ticks


def fmt_tick(v: float, step: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1e6 or step < 1e-4:
        return f"{v:.1e}"
    decimals = max(0, -math.floor(math.log10(step) + 1e-9)) if step < 1 else 0
    if step < 1 and round(step * 10 ** decimals) % 1:
        decimals += 1  # 0.25 needs two decimals
    return f"{v:.{decimals}f}"


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def _segments(xs, ys):
    """Runs of consecutive finite points: a NaN breaks the line instead of dropping to zero."""
    run: list[tuple[float, float]] = []
    for x, y in zip(xs, ys):
        if _finite(y):
            run.append((x, y))
        elif run:
            yield run
            run = []
    if run:
        yield run


def thin(seg: list[tuple[float, float]], px) -> list[tuple[float, float]]:
    """Per pixel column keep the first, lowest, highest and last point: a long run draws the
    same picture (spikes included) from a path a few times the plot width instead of every step."""
    cols: dict[int, list[tuple[float, float]]] = {}
    for p in seg:
        cols.setdefault(int(px(p[0])), []).append(p)
    if len(cols) * 4 >= len(seg):
        return seg
    out = []
    for pts in cols.values():
        keep = {pts[0], min(pts, key=lambda p: p[1]), max(pts, key=lambda p: p[1]), pts[-1]}
        out.extend(p for p in pts if p in keep)
    return out


def _step_ticks(xticks: list[float], px, top: float, ph: float) -> list[str]:
    """Vertical gridlines and labels of the step axis."""
    step = max(1.0, xticks[1] - xticks[0])
    return [f'<line class="gridline" x1="{px(t)}" x2="{px(t)}" y1="{top}" y2="{top + ph}"/>'
            f'<text class="tick" x="{px(t)}" y="{top + ph + 16}" text-anchor="middle">{fmt_tick(t, step)}</text>'
            for t in xticks]


def _legend_layout(items: list[tuple[str, str]], width: float) -> tuple[list[tuple[float, float, str, str]], float]:
    """Place (label, key) items left to right, wrapping lines; returns positions and total height."""
    out, x, y, line_h = [], 0.0, 0.0, 16
    for label, key in items:
        w = 26 + CHAR_W * len(label) + 14
        if x > 0 and x + w > width:
            x, y = 0.0, y + line_h
        out.append((x, y, label, key))
        x += w
    return out, (y + line_h if items else 0)


def _short(s: str, n: int = 48) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def _e(s) -> str:
    return escape(str(s), quote=True)  # every user string goes through this


@dataclass
class _Plot:
    """Where a chart's plot area sits and its data domain: maps data to SVG coordinates."""
    left: float
    top: float
    pw: float
    ph: float
    xlo: float
    xhi: float
    ylo: float
    yhi: float

    def px(self, x: float) -> float:
        return round(self.left + (x - self.xlo) / (self.xhi - self.xlo) * self.pw, 1)

    def py(self, y: float) -> float:
        return round(self.top + (self.yhi - y) / (self.yhi - self.ylo) * self.ph, 1)


def _legend_items(chart: Chart) -> list[tuple[str, str]]:
    """(label, key) per legend entry: "s<i>" for a series, "r<i>" for a rule."""
    legend_items: list[tuple[str, str]] = []
    for i, s in enumerate(chart.series):
        if s.legend:
            legend_items.append((_short(s.label), f"s{i}"))
    for i, r in enumerate(chart.rules):
        if r.key != "":
            legend_items.append((_short(r.label if r.key is None else r.key), f"r{i}"))
    return legend_items


def _domains(chart: Chart) -> tuple[tuple[float, float, list[float]], tuple[float, float, list[float]], bool]:
    """The x and y axes (domain and ticks) covering the data, bands and horizontal rules; and whether there is data."""
    xs_all = [x for s in chart.series for x, y in zip(s.xs, s.ys) if _finite(y)]
    xlo, xhi = chart.xdomain or ((min(xs_all), max(xs_all)) if xs_all else (0, 1))
    xaxis = axis(xlo, xhi, n=6, integer=True)
    ys_all = [y for s in chart.series for y in s.ys if _finite(y)]
    has_data = bool(ys_all)
    ys_all += [v for s in chart.series for part in (s.band or ()) + (s.bars or ()) for v in part if _finite(v)]
    ys_all += [r.at for r in chart.rules if not r.vertical and _finite(r.at)]
    yaxis = axis(min(ys_all, default=0.0), max(ys_all, default=1.0))
    return xaxis, yaxis, has_data


def _frame_svg(chart: Chart, plot: _Plot, xticks: list[float], yticks: list[float], height: float) -> list[str]:
    """Gridlines, ticks, the frame and the axis labels."""
    left, top, pw, ph, py = plot.left, plot.top, plot.pw, plot.ph, plot.py
    out = []
    for t in yticks:
        out.append(f'<line class="gridline" x1="{left}" x2="{left + pw}" y1="{py(t)}" y2="{py(t)}"/>'
                   f'<text class="tick" x="{left - 6}" y="{py(t) + 4}" text-anchor="end">{fmt_tick(t, yticks[1] - yticks[0])}</text>')
    out.extend(_step_ticks(xticks, plot.px, top, ph))
    out.append(f'<rect class="frame" x="{left}" y="{top}" width="{pw}" height="{ph}"/>')
    out.append(f'<text class="axis-label" x="{left + pw / 2}" y="{height - 6}" text-anchor="middle">{_e(chart.xlabel)}</text>')
    if chart.ylabel:
        out.append(f'<text class="axis-label" transform="translate(14 {top + ph / 2}) rotate(-90)" '
                   f'text-anchor="middle">{_e(chart.ylabel)}</text>')
    return out


def _rules_svg(chart: Chart, plot: _Plot) -> list[str]:
    """Reference lines: vertical at a step, horizontal at a value."""
    left, top, pw, ph, px, py, e = plot.left, plot.top, plot.pw, plot.ph, plot.px, plot.py, _e
    out = []
    for r in chart.rules:
        if r.vertical:
            out.append(f'<line class="rule" x1="{px(r.at)}" x2="{px(r.at)}" y1="{top}" y2="{top + ph}" stroke="{e(r.color)}" '
                       f'stroke-dasharray="{e(r.dash)}"><title>{e(r.label)}</title></line>')
        else:
            out.append(f'<line class="rule" x1="{left}" x2="{left + pw}" y1="{py(r.at)}" y2="{py(r.at)}" stroke="{e(r.color)}" '
                       f'stroke-dasharray="{e(r.dash)}"><title>{e(r.label)}: {r.at:.4g}</title></line>')
    return out


def _series_svg(chart: Chart, plot: _Plot) -> list[str]:
    """Shaded bands first, then each series' line, its error bars and its dots (all dots when sparse,
    else lone points)."""
    px, py, e = plot.px, plot.py, _e
    out = []
    for s in chart.series:
        if s.band:
            lo_, hi_ = s.band
            for seg in _segments(s.xs, [h if _finite(lo) else math.nan for lo, h in zip(lo_, hi_)]):
                los = dict(zip(s.xs, lo_))
                pts = [f"{px(x)},{py(y)}" for x, y in seg] + [f"{px(x)},{py(los[x])}" for x, _ in reversed(seg)]
                out.append(f'<polygon class="band" points="{" ".join(pts)}" fill="{e(s.color)}"/>')
    for s in chart.series:
        segs = list(_segments(s.xs, s.ys))
        attrs = f'stroke="{e(s.color)}" stroke-width="{s.width}" stroke-opacity="{s.opacity}"'
        if s.dash:
            attrs += f' stroke-dasharray="{e(s.dash)}"'
        d = " ".join("M" + " L".join(f"{px(x)},{py(y)}" for x, y in thin(seg, px)) for seg in segs if len(seg) > 1)
        if d:
            out.append(f'<path class="line" d="{d}" {attrs}><title>{e(s.label)}</title></path>')
        if s.bars:  # a vertical line from low to high with 3px caps, at each point that has both
            bars = " ".join(f"M{px(x)},{py(lo)} L{px(x)},{py(hi)} M{px(x) - 3},{py(lo)} L{px(x) + 3},{py(lo)} "
                            f"M{px(x) - 3},{py(hi)} L{px(x) + 3},{py(hi)}"
                            for x, y, lo, hi in zip(s.xs, s.ys, *s.bars) if _finite(y) and _finite(lo) and _finite(hi))
            if bars:
                out.append(f'<path class="errbar" d="{bars}" fill="none" stroke="{e(s.color)}" stroke-width="1" '
                           f'stroke-opacity="{s.opacity}"/>')
        n_pts = sum(len(seg) for seg in segs)
        sparse = s.markers if s.markers is not None else n_pts <= 40
        for seg in segs:
            if sparse or len(seg) == 1:
                out.extend(f'<circle class="dot" cx="{px(x)}" cy="{py(y)}" r="2.8" fill="{e(s.color)}" '
                           f'fill-opacity="{s.opacity}"/>' for x, y in seg)
    return out


def _legend_svg(chart: Chart, placed: list[tuple[float, float, str, str]], left: float) -> list[str]:
    """The chart's own legend: a line sample (colour, dash, width) and the label per placed item."""
    out, e = [], _e
    for x, y, label, key in placed:
        lx, ly = left + x, 30 + y
        if key[0] == "s":
            s = chart.series[int(key[1:])]
            color, dash, sw = s.color, s.dash, s.width
        else:
            r = chart.rules[int(key[1:])]
            color, dash, sw = r.color, r.dash, 1.5
        dash_attr = f' stroke-dasharray="{e(dash)}"' if dash else ""
        out.append(f'<line x1="{lx}" x2="{lx + 22}" y1="{ly + 4}" y2="{ly + 4}" stroke="{e(color)}" stroke-width="{sw}"{dash_attr}/>'
                   f'<text class="legend" x="{lx + 26}" y="{ly + 8}">{e(label)}</text>')
    return out


def render(chart: Chart, chart_id: str, hover_data: bool = True) -> str:
    """One chart as an HTML <figure>: the SVG plus its hover data (none for a page that carries
    no script at all, such as the grid report)."""
    left, right, bottom = 58, 14, 40
    width = chart.width
    pw = width - left - right
    placed, legend_h = _legend_layout(_legend_items(chart) if chart.legend else [], pw)
    top = 30 + legend_h + 8
    ph = chart.plot_h
    height = top + ph + bottom
    (xlo, xhi, xticks), (ylo, yhi, yticks), has_data = _domains(chart)
    plot = _Plot(left, top, pw, ph, xlo, xhi, ylo, yhi)
    e = _e
    out = [f'<svg class="chart" id="{chart_id}" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
           f'role="img" aria-label="{e(chart.title)}" xmlns="http://www.w3.org/2000/svg">',
           f'<clipPath id="{chart_id}-clip"><rect x="{left}" y="{top}" width="{pw}" height="{ph}"/></clipPath>',
           f'<text class="title" x="{left}" y="18">{e(chart.title)}</text>']
    if chart.note:
        out.append(f'<text class="note" x="{width - right}" y="18" text-anchor="end">{e(chart.note)}</text>')
    out.extend(_frame_svg(chart, plot, xticks, yticks, height))
    # data, clipped to the plot area
    out.append(f'<g clip-path="url(#{chart_id}-clip)">')
    out.extend(_rules_svg(chart, plot))
    out.extend(_series_svg(chart, plot))
    out.append('</g>')
    if not has_data:
        out.append(f'<text class="empty" x="{left + pw / 2}" y="{top + ph / 2}" text-anchor="middle">not logged</text>')
    out.extend(_legend_svg(chart, placed, left))
    out.append(f'<line class="cross" x1="0" x2="0" y1="{top}" y2="{top + ph}" visibility="hidden"/>')
    out.append('</svg>')
    hover = {"x0": left, "x1": left + pw, "y0": top, "y1": top + ph, "xd": [xlo, xhi],
             "series": [{"label": s.label, "color": s.color, "xs": s.xs, "ys": [y if _finite(y) else None for y in s.ys],
                         **({"notes": s.notes} if s.notes else {})}
                        for s in chart.series if s.hover]}
    data = (f'<script type="application/json" class="chart-data" data-for="{chart_id}">{script_json(hover)}</script>'
            if hover_data else "")
    return f'<figure class="plot">{"".join(out)}{data}</figure>'


def script_json(obj) -> str:
    """JSON safe inside a <script> element: no '</script>' or '<!--' can be formed from user strings."""
    text = json.dumps(obj, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    return (text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


@dataclass
class Mark:
    x: float
    lane: str
    color: str
    text: str  # shown on hover
    shape: int = 0  # index into the marker shapes (one per run)


def key_html(items: list[tuple[str, str, str]]) -> str:
    """A shared HTML legend for a row of charts: (label, colour, dash) per entry."""
    spans = []
    for label, color, dash in items:
        dash_attr = f' stroke-dasharray="{escape(dash, quote=True)}"' if dash else ""
        spans.append(f'<span class="key"><svg width="24" height="8" aria-hidden="true"><line x1="0" x2="24" y1="4" y2="4" '
                     f'stroke="{escape(color, quote=True)}" stroke-width="2"{dash_attr}/></svg>{escape(label)}</span>')
    return f'<div class="keys">{"".join(spans)}</div>'


def timeline(title: str, lanes: list[str], marks: list[Mark], xdomain: tuple[float, float], chart_id: str,
             width: int = 1100, legend: list[tuple[str, str, int]] = ()) -> str:
    """Markers on one row per lane (an alarm kind), over steps; the message is the marker's tooltip."""
    left, right, top, lane_h, bottom = 190, 14, 34, 30, 40
    pw = width - left - right
    ph = lane_h * max(1, len(lanes))
    height = top + ph + bottom
    xlo, xhi, xticks = axis(*xdomain, n=10, integer=True)
    e = lambda s: escape(str(s), quote=True)  # noqa: E731

    def px(x: float) -> float:
        return round(left + (x - xlo) / (xhi - xlo) * pw, 1)

    out = [f'<svg class="chart timeline" id="{chart_id}" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
           f'role="img" aria-label="{e(title)}" xmlns="http://www.w3.org/2000/svg">',
           f'<text class="title" x="{left}" y="18">{e(title)}</text>']
    out.extend(_step_ticks(xticks, px, top, ph))
    for i, lane in enumerate(lanes):
        y = top + lane_h * i + lane_h / 2
        out.append(f'<line class="gridline" x1="{left}" x2="{left + pw}" y1="{y}" y2="{y}"/>'
                   f'<text class="tick" x="{left - 8}" y="{y + 4}" text-anchor="end">{e(_short(lane, 28))}</text>')
    out.append(f'<rect class="frame" x="{left}" y="{top}" width="{pw}" height="{ph}"/>')
    out.append(f'<text class="axis-label" x="{left + pw / 2}" y="{height - 6}" text-anchor="middle">step</text>')
    lx = left + 120
    for label, color, shape in legend:  # which run each marker colour and shape stands for
        out.append(_marker(shape, lx, 14, 5).format(fill=e(color))
                   + f'<text class="legend" x="{lx + 9}" y="18">{e(_short(label))}</text>')
        lx += 30 + CHAR_W * len(_short(label))
    for m in marks:
        x, y = px(m.x), top + lane_h * lanes.index(m.lane) + lane_h / 2
        shape = _marker(m.shape, x, y, 6.5)
        out.append(f'<g class="alarm" tabindex="0">{shape.format(fill=e(m.color))}<title>{e(m.text)}</title></g>')
    if not marks:
        out.append(f'<text class="empty" x="{left + pw / 2}" y="{top + ph / 2 + 4}" text-anchor="middle">no alarms</text>')
    out.append('</svg>')
    return f'<figure class="plot wide">{"".join(out)}</figure>'


def _marker(i: int, x: float, y: float, r: float) -> str:
    """A filled marker template (fill left as {fill}): triangle, square, diamond, circle, cycling."""
    pts = {0: [(x, y - r), (x + r, y + r * 0.8), (x - r, y + r * 0.8)],
           1: [(x - r * 0.8, y - r * 0.8), (x + r * 0.8, y - r * 0.8), (x + r * 0.8, y + r * 0.8), (x - r * 0.8, y + r * 0.8)],
           2: [(x, y - r), (x + r, y), (x, y + r), (x - r, y)]}.get(i % 4)
    if pts is None:
        return f'<circle cx="{x}" cy="{y}" r="{r * 0.8}" fill="{{fill}}" stroke="#222" stroke-width="0.8"/>'
    p = " ".join(f"{round(a, 1)},{round(b, 1)}" for a, b in pts)
    return f'<polygon points="{p}" fill="{{fill}}" stroke="#222" stroke-width="0.8"/>'
