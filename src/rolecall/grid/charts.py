"""Two SVG charts the run report does not draw: grouped horizontal bars (Figs. 2 and 5) and a
scatter with the diagonal (Fig. 3). Axes, ticks and styling come from rolecall.report.svg and
its stylesheet; every value and range is also in the SVG's hover titles."""
from __future__ import annotations

from html import escape

from rolecall.report.svg import CHAR_W, axis, fmt_tick

# (series label, mean, low, high, colour): one bar, with a whisker from low to high (the seeds' range)
Bar = tuple[str, float | None, float | None, float | None, str]


def _e(s) -> str:
    return escape(str(s), quote=True)


def _short(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def bars(title: str, groups: list[tuple[str, list[Bar]]], xlabel: str, chart_id: str, width: int = 760,
         fmt=lambda v: f"{v:.3g}") -> str:
    """One row per group (a cell), one bar per series (a routing) in it, measured from zero."""
    label_chars = min(40, max((len(g) for g, _ in groups), default=4))  # longer labels are cut (full on hover)
    label_w = int(label_chars * CHAR_W) + 12
    left, right, top, bar_h, gap, bottom = label_w, 16, 30, 11, 9, 38
    pw = width - left - right
    vals = [v for _, bs in groups for _, m, lo, hi, _ in bs for v in (m, lo, hi) if v is not None]
    lo_, hi_, ticks = axis(min([0.0, *vals]), max([0.0, *vals]))
    n_rows = sum(max(1, len(bs)) for _, bs in groups)
    ph = n_rows * bar_h + len(groups) * gap + gap
    height = top + ph + bottom

    def px(v: float) -> float:
        return round(left + (v - lo_) / (hi_ - lo_) * pw, 1)

    out = [f'<svg class="chart" id="{chart_id}" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
           f'role="img" aria-label="{_e(title)}" xmlns="http://www.w3.org/2000/svg">',
           f'<text class="title" x="{left}" y="18">{_e(title)}</text>']
    step = ticks[1] - ticks[0]
    for t in ticks:
        out.append(f'<line class="gridline" x1="{px(t)}" x2="{px(t)}" y1="{top}" y2="{top + ph}"/>'
                   f'<text class="tick" x="{px(t)}" y="{top + ph + 15}" text-anchor="middle">{fmt_tick(t, step)}</text>')
    out.append(f'<rect class="frame" x="{left}" y="{top}" width="{pw}" height="{ph}"/>')
    out.append(f'<line x1="{px(0)}" x2="{px(0)}" y1="{top}" y2="{top + ph}" stroke="#394150" stroke-width="1"/>')
    y = top + gap
    for label, bs in groups:
        rows_h = max(1, len(bs)) * bar_h
        out.append(f'<text class="tick" x="{left - 6}" y="{y + rows_h / 2 + 4}" text-anchor="end">'
                   f'<title>{_e(label)}</title>{_e(_short(label, label_chars))}</text>')
        for series, mean, lo, hi, color in bs:
            if mean is not None:
                x0, x1 = sorted((px(0), px(mean)))
                spread = f" (range {fmt(lo)} to {fmt(hi)})" if lo is not None and hi is not None and lo != hi else ""
                out.append(f'<rect class="bar" x="{x0}" y="{y + 1}" width="{max(x1 - x0, 0.8)}" height="{bar_h - 2}" '
                           f'fill="{_e(color)}"><title>{_e(label)} · {_e(series)}: {fmt(mean)}{spread}</title></rect>')
                if spread:
                    out.append(f'<line x1="{px(lo)}" x2="{px(hi)}" y1="{y + bar_h / 2}" y2="{y + bar_h / 2}" '
                               f'stroke="#222" stroke-width="1"/>')
            else:
                out.append(f'<text class="note" x="{px(0) + 4}" y="{y + bar_h - 2}">{_e(series)}: not logged</text>')
            y += bar_h
        y += gap if bs else bar_h + gap
    out.append(f'<text class="axis-label" x="{left + pw / 2}" y="{height - 6}" text-anchor="middle">{_e(xlabel)}</text>')
    if not groups:
        out.append(f'<text class="empty" x="{left + pw / 2}" y="{top + ph / 2}" text-anchor="middle">no finished cells</text>')
    out.append("</svg>")
    return f'<figure class="plot">{"".join(out)}</figure>'


# (x, y, hover text, colour)
Point = tuple[float, float, str, str]


def scatter(title: str, points: list[Point], xlabel: str, ylabel: str, chart_id: str, size: int = 420) -> str:
    """Points on equal axes with the y = x diagonal: above it, y wins."""
    left, right, top, bottom = 58, 16, 30, 40
    pw = size - left - right
    vals = [v for x, y, _, _ in points for v in (x, y)]
    lo_, hi_, ticks = axis(min(vals, default=0.0), max(vals, default=1.0))
    height = top + pw + bottom
    step = ticks[1] - ticks[0]

    def px(v: float) -> float:
        return round(left + (v - lo_) / (hi_ - lo_) * pw, 1)

    def py(v: float) -> float:
        return round(top + (hi_ - v) / (hi_ - lo_) * pw, 1)

    out = [f'<svg class="chart" id="{chart_id}" viewBox="0 0 {size} {height}" width="{size}" height="{height}" '
           f'role="img" aria-label="{_e(title)}" xmlns="http://www.w3.org/2000/svg">',
           f'<text class="title" x="{left}" y="18">{_e(title)}</text>']
    for t in ticks:
        out.append(f'<line class="gridline" x1="{left}" x2="{left + pw}" y1="{py(t)}" y2="{py(t)}"/>'
                   f'<line class="gridline" x1="{px(t)}" x2="{px(t)}" y1="{top}" y2="{top + pw}"/>'
                   f'<text class="tick" x="{left - 6}" y="{py(t) + 4}" text-anchor="end">{fmt_tick(t, step)}</text>'
                   f'<text class="tick" x="{px(t)}" y="{top + pw + 15}" text-anchor="middle">{fmt_tick(t, step)}</text>')
    out.append(f'<rect class="frame" x="{left}" y="{top}" width="{pw}" height="{pw}"/>')
    out.append(f'<line class="rule" x1="{px(lo_)}" y1="{py(lo_)}" x2="{px(hi_)}" y2="{py(hi_)}" stroke="#999" '
               f'stroke-dasharray="6 4"><title>y = x</title></line>')
    for x, y, text, color in points:
        out.append(f'<circle class="dot" cx="{px(x)}" cy="{py(y)}" r="5" fill="{_e(color)}" fill-opacity="0.85" '
                   f'stroke="#222" stroke-width="0.8"><title>{_e(text)}</title></circle>')
    if not points:
        out.append(f'<text class="empty" x="{left + pw / 2}" y="{top + pw / 2}" text-anchor="middle">'
                   "no cell finished under both routings</text>")
    out.append(f'<text class="axis-label" x="{left + pw / 2}" y="{height - 6}" text-anchor="middle">{_e(xlabel)}</text>'
               f'<text class="axis-label" transform="translate(14 {top + pw / 2}) rotate(-90)" '
               f'text-anchor="middle">{_e(ylabel)}</text></svg>')
    return f'<figure class="plot">{"".join(out)}</figure>'
