"""The collaboration game's outputs (examples/collaboration_game.py): its two-panel SVG figure,
compact JSON and the summary table. Plain Python, no numpy."""
from __future__ import annotations

import copy
import json
import math
import platform
import re
import shlex
import sys
import time
from importlib.metadata import version
from pathlib import Path

# -- the plot -------------------------------------------------------------------------------------
ARM_STYLE = {"single vs pi=0.5": ("#1f77b4", ""), "single vs pi=0.6": ("#2ca02c", ""),
             "single vs pi=0.7": ("#ff7f0e", ""), "single vs pi=0.9": ("#7f7f7f", "5 4"),
             "co-trained pair": ("#d62728", "")}


def _panel(arms: dict, key: str, title: str, ylo: float, yhi: float, x0: float, width: float,
           height: float, top: float) -> list[str]:
    """One line chart: mean over seeds as a line, min..max over seeds as a shaded band."""
    left, bottom = 48, 34
    pw, ph = width - left - 10, height - bottom - top
    n = len(next(iter(arms.values()))["curves"][key]["mean"])

    def px(i: float) -> float:
        return round(x0 + left + i / max(1, n - 1) * pw, 1)

    def py(v: float) -> float:
        return round(top + (yhi - min(max(v, ylo), yhi)) / (yhi - ylo) * ph, 1)

    out = [f'<text x="{x0 + left}" y="{top - 8}" font-size="13" font-weight="bold">{title}</text>',
           f'<rect x="{x0 + left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>']
    for i in range(5):
        v = ylo + (yhi - ylo) * i / 4
        out.append(f'<line x1="{x0 + left}" x2="{x0 + left + pw}" y1="{py(v)}" y2="{py(v)}" stroke="#e5e5e5"/>'
                   f'<text x="{x0 + left - 5}" y="{py(v) + 4}" font-size="11" text-anchor="end">{v:g}</text>')
    step = 50 if n <= 400 else 100
    for it in range(0, n, step):
        out.append(f'<text x="{px(it)}" y="{top + ph + 15}" font-size="11" text-anchor="middle">{it}</text>')
    out.append(f'<text x="{x0 + left + pw / 2}" y="{top + ph + 29}" font-size="11" text-anchor="middle">'
               f'training iteration</text>')
    keep = sorted({*range(0, n, max(1, n // 150)), n - 1})  # at most ~150 points: the file stays small
    for name, arm in arms.items():
        color, dash = ARM_STYLE.get(name, ("#000000", ""))
        c = arm["curves"][key]
        band = [f"{px(i)},{py(c['max'][i])}" for i in keep] + [f"{px(i)},{py(c['min'][i])}" for i in reversed(keep)]
        out.append(f'<polygon points="{" ".join(band)}" fill="{color}" fill-opacity="0.15" stroke="none"/>')
        line = " ".join(f"{px(i)},{py(c['mean'][i])}" for i in keep)
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(f'<polyline points="{line}" fill="none" stroke="{color}" stroke-width="1.8"{dash_attr}>'
                   f'<title>{name}</title></polyline>')
    return out


def write_svg(results: dict, path: Path) -> None:
    """Two panels, collaboration rate and return per agent against iterations; standalone SVG."""
    arms = results["arms"]
    width, height, legend_h = 960, 330, 26
    returns = [v for arm in arms.values() for stat in ("min", "max") for v in arm["curves"]["mean_return"][stat]]
    rlo, rhi = math.floor(min(returns) * 2) / 2, math.ceil(max(returns) * 2) / 2
    seeds = len(results["seeds"])
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height + legend_h}" '
             f'width="{width}" height="{height + legend_h}" font-family="sans-serif">',
             f'<rect width="{width}" height="{height + legend_h}" fill="white"/>']
    parts += _panel(arms, "collab_rate", "Collaboration rate (a0 share of decisions before synergy)",
                    0.0, 1.0, 0, width / 2, height, 40)
    parts += _panel(arms, "mean_return", "Return per agent over T turns", rlo, rhi, width / 2, width / 2, height, 40)
    x = 48
    for name in arms:
        color, dash = ARM_STYLE.get(name, ("#000000", ""))
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        parts.append(f'<line x1="{x}" x2="{x + 22}" y1="{height + 8}" y2="{height + 8}" stroke="{color}" '
                     f'stroke-width="2.5"{dash_attr}/>'
                     f'<text x="{x + 27}" y="{height + 12}" font-size="12">{name}</text>')
        x += 42 + 6.5 * len(name)
    parts.append(f'<text x="{width - 10}" y="14" font-size="11" text-anchor="end" fill="#555">'
                 f'{len(results["questions"])} questions, T = {results["game"]["turns"]}; '
                 f'line: mean of {seeds} seeds, band: min..max</text>')
    parts.append("</svg>")
    path.write_text("\n".join(parts) + "\n")


def dumps(obj) -> str:
    """Indented JSON with each list of numbers on one line."""
    text = json.dumps(obj, indent=1)
    return re.sub(r"\[\s+([-+0-9.eE,\s]+?)\s+\]", lambda m: "[" + re.sub(r"\s+", " ", m.group(1)) + "]", text)


def summary_table(results: dict) -> str:
    lines = ["| arm | final collaboration rate (exact, mean ± std over seeds) | min..max | return per agent |",
             "|---|---|---|---|"]
    for name, arm in results["arms"].items():
        f = arm["final"]
        c, r = f["collab_rate_exact"], f["return_exact"]
        lines.append(f"| {name} | {c['mean']:.3f} ± {c['std']:.3f} | {c['min']:.3f}..{c['max']:.3f} "
                     f"| {r['mean']:.3f} |")
    return "\n".join(lines)


CURVE_EVERY = 5  # iterations between a record's curve points; the figure uses every iteration


def thin_curves(results: dict) -> None:
    """Keep every CURVE_EVERY-th point (and the last) of each curve, with its iteration number."""
    for arm in results["arms"].values():
        n = len(arm["curves"]["collab_rate"]["mean"])
        keep = sorted({*range(0, n, CURVE_EVERY), n - 1})
        for series in arm["curves"].values():
            for stat in series:
                series[stat] = [series[stat][i] for i in keep]
        arm["curves"]["iteration"] = keep


def write_record(results: dict, path: Path) -> None:
    """The result as recorded: curves thinned, with its provenance (rolecall's code, numpy, the
    machine, the date and the command as typed)."""
    from rolecall.rundir.sitting import code_version, machine  # the game runs without rolecall; a record names it

    doc = copy.deepcopy(results)
    thin_curves(doc)
    doc["provenance"] = {"code": code_version(), "versions": {"numpy": version("numpy"),
                                                             "python": platform.python_version()},
                         "machine": machine(), "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                         "command": shlex.join(["python", *getattr(sys, "orig_argv", sys.argv)[1:]])}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(doc) + "\n")


def write_outputs(results: dict, *, out: Path | None, figure: Path | None, record: Path | None) -> list[Path]:
    """What the command line asked for: results.json and the figure into `out`, the figure at
    `figure` (from the full-resolution curves), the record at `record`; the paths written."""
    wrote = []
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(dumps(results) + "\n")
        write_svg(results, out / "collaboration_game.svg")
        wrote += [out / "results.json", out / "collaboration_game.svg"]
    if figure:
        figure.parent.mkdir(parents=True, exist_ok=True)
        write_svg(results, figure)
        wrote.append(figure)
    if record:
        write_record(results, record)
        wrote.append(record)
    return wrote
