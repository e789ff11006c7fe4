"""Read run directories (config.yaml + metrics.jsonl) into plain series for the report."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from rolecall.diagnostics.metrics_log import ReportError, read_metrics

NAN = float("nan")


@dataclass
class Run:
    name: str
    path: Path
    config: dict
    rows: list[dict]
    warnings: list[str] = field(default_factory=list)

    @property
    def workflow(self) -> str:
        wf = self.config.get("workflow")
        return str(wf.get("name", "?")) if isinstance(wf, dict) else "?"

    @property
    def routing(self) -> str:
        r = self.config.get("routing")
        if isinstance(r, dict):
            return ", ".join(f"{role}→{pol}" for role, pol in r.items())
        return "?" if r is None else str(r)

    @property
    def events(self) -> list[dict]:
        return [r for r in self.rows if "event" in r]

    @property
    def alarms(self) -> list[dict]:
        return [r for r in self.events if r.get("event") == "alarm"]

    @property
    def last_step(self) -> int:
        return max((r["step"] for r in self.rows), default=0)

    @property
    def roles(self) -> list[str]:
        return discover_roles(self.rows)

    def series(self, key: str) -> tuple[list[int], list[float]]:
        """(steps, values) of `key` over the rows that log it; NaN where it is null or not a number."""
        by_step: dict[int, float] = {}
        for r in self.rows:
            if key in r and "event" not in r:
                by_step[r["step"]] = as_float(r[key])  # a resumed run may repeat a step: the last one wins
        steps = sorted(by_step)
        return steps, [by_step[s] for s in steps]


def as_float(v) -> float:
    """Numbers pass through; null, strings, bools and the like become NaN (plotted as a gap)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return NAN
    return float(v)


def discover_roles(rows: list[dict]) -> list[str]:
    """Role names from `role/<role>/<metric>` keys, in order of first appearance (the workflow's order)."""
    seen: dict[str, None] = {}
    for r in rows:
        for k in r:
            if k.startswith("role/") and k.count("/") >= 2:
                seen.setdefault(k[len("role/"):].rsplit("/", 1)[0], None)
    return list(seen)


def normalise(values: list[float]) -> list[float]:
    """Each value over |first finite non-zero value| (Fig. 6 of the paper); all NaN if there is none.

    A zero cannot be a baseline (χ² starts near 0 on-policy), so it is skipped; the absolute
    value keeps a climbing series climbing even if its baseline is negative.
    """
    base = next((v for v in values if math.isfinite(v) and v != 0.0), None)
    if base is None:
        return [NAN] * len(values)
    return [v / abs(base) if math.isfinite(v) else NAN for v in values]


def load_run(path: Path, name: str | None = None) -> Run:
    path = Path(path)
    metrics = path / "metrics.jsonl"
    if not path.is_dir():
        raise ReportError(f"{path}: not a directory (expected a run directory holding metrics.jsonl)")
    if not metrics.is_file():
        raise ReportError(f"{path}: not a run directory (no metrics.jsonl)")
    rows, warnings = read_metrics(metrics)
    config: dict = {}
    cfg_path = path / "config.yaml"
    if cfg_path.is_file():
        try:
            loaded = yaml.safe_load(cfg_path.read_text(encoding="utf-8"))
            config = loaded if isinstance(loaded, dict) else {}
        except (yaml.YAMLError, UnicodeDecodeError) as e:
            warnings.append(f"{cfg_path}: unreadable ({type(e).__name__}); workflow and routing unknown")
    else:
        warnings.append(f"{cfg_path}: missing; workflow and routing unknown")
    return Run(name=name or path.resolve().name, path=path, config=config, rows=rows, warnings=warnings)


def run_names(paths: list[Path]) -> list[str]:
    """Directory names, lengthened with parent folders until they are distinct."""
    parts = [Path(p).resolve().parts for p in paths]
    for depth in range(1, max(len(p) for p in parts) + 1):
        names = ["/".join(p[-depth:]) for p in parts]
        if len(set(names)) == len(names):
            return names
    return [f"{n} #{i + 1}" for i, n in enumerate(names)]  # the same directory given twice
