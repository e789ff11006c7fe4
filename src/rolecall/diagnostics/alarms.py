"""Drift alarms over the metric stream: each fires once, as an event.

The alarms watch for the failures described in "When Does Multi-Agent RL Improve LLM
Workflows? Workflow, Scale, and Policy-Sharing Tradeoffs" (arXiv 2605.24202): role-level
gradient amplification and Shared-Policy role capture (its §5), late validation drift (§4.4).

- `gradient_amplification` (Isolated-Policy): a role with parallel slots (several
  calls of one role in the same wave) has its own adapter, and its training perplexity or
  E[(π/μ)²] = 1 + χ²_token climbs to `amp_ratio` times its first value while every other
  role stays within `flat_ratio` of its own.
- `sp_role_capture` (a policy shared by several roles): one role's output shape migrates
  toward another's. Shape = log(1 + median completion length), code-fence rate and terse
  rate. It fires when, for some shape feature, the gap between the two roles has closed to
  at most `capture_closing` of its first value, the captured role itself moved at least
  `capture_move` of that first gap, and the first gap was real (`min_gap` per feature).
- `validation_cliff`: validation accuracy falls `cliff_margin` (absolute) or more below its
  running peak, and the fall is larger than `cliff_z` standard errors of the difference,
  sqrt(se_peak² + se_now²): a validation over a few problems moves by more than the margin
  from sampling alone (8 problems: one answer is 0.125). Each row's se is its
  `val/accuracy_se`, else the binomial sqrt(p(1-p)/n) from `val/n`; when either row has
  neither, or `cliff_z` is 0, the margin alone decides. It re-arms after a new peak.

"First" and "now" are means over `window` steps (the first `window` finite values, and the
latest `window`), so one noisy step neither sets the baseline nor fires an alarm.
"""
from __future__ import annotations

import math
from collections import defaultdict, deque
from dataclasses import dataclass, field
from itertools import permutations
from statistics import fmean

ALARMS = ("gradient_amplification", "sp_role_capture", "validation_cliff")


@dataclass(frozen=True)
class AlarmThresholds:
    window: int = 5
    amp_ratio: float = 2.0
    flat_ratio: float = 1.25
    capture_closing: float = 0.5
    capture_move: float = 0.5
    min_gap: dict = field(default_factory=lambda: {"log_len": 0.5, "fence_rate": 0.3, "terse_rate": 0.3})
    cliff_margin: float = 0.1
    cliff_z: float = 1.96


class _Series:
    """First-window and latest-window means of one metric."""

    def __init__(self, window: int) -> None:
        self.first: list[float] = []
        self.recent: deque[float] = deque(maxlen=window)
        self.window = window

    def add(self, v: float | None) -> None:
        if v is None or not math.isfinite(v):
            return
        if len(self.first) < self.window:
            self.first.append(v)
        self.recent.append(v)

    @property
    def ready(self) -> bool:
        return len(self.first) == self.window and len(self.recent) == self.window

    def ratio(self) -> float:
        base = fmean(self.first)
        return fmean(self.recent) / base if base > 0 else float("nan")

    @property
    def start(self) -> float:
        return fmean(self.first)

    @property
    def now(self) -> float:
        return fmean(self.recent)


class AlarmMonitor:
    """Feed it every metrics row (training and validation); it returns the alarm events to log."""

    def __init__(self, roles_by_policy: dict[str, list[str]], thresholds: AlarmThresholds = AlarmThresholds()) -> None:
        self.t = thresholds
        self.policy_of = {r: p for p, roles in roles_by_policy.items() for r in roles}
        self.shared = {p: roles for p, roles in roles_by_policy.items() if len(roles) > 1}
        self.series: dict[tuple[str, str], _Series] = defaultdict(lambda: _Series(self.t.window))
        self.parallel: set[str] = set()
        self.fired: set[tuple[str, str | None]] = set()
        self.val_peak = -math.inf
        self.val_peak_se: float | None = None  # the se logged with the peak's row
        self.cliff_armed = True

    def restore(self, rows: list[dict]) -> None:
        """Rebuild state from a run's earlier rows (resume); alarms already logged stay fired."""
        for row in rows:
            if row.get("event") == "alarm":
                self.fired.add((row["alarm"], row.get("role")))
            elif "event" not in row:  # other events (why a run stopped) carry no metric
                self.observe(row, emit=False)

    def observe(self, row: dict, *, emit: bool = True) -> list[dict]:
        if "val/accuracy" in row:
            events = self._validation(row)
        else:
            self._record(row)
            events = self._amplification(row["step"]) + self._capture(row["step"])
        return events if emit else []

    # -- state ------------------------------------------------------------------------
    def _record(self, row: dict) -> None:
        for key, v in row.items():
            if not key.startswith("role/"):
                continue
            _, role, metric = key.split("/", 2)
            if metric == "jaccard3":
                self.parallel.add(role)
            elif metric == "chi2_token":
                self.series[(role, "r2")].add(None if v is None else 1.0 + v)
            elif metric == "training_ppl":
                self.series[(role, "ppl")].add(v)
            elif metric == "len_p50":
                self.series[(role, "log_len")].add(None if v is None else math.log1p(max(v, 0.0)))
            elif metric in ("fence_rate", "terse_rate"):
                self.series[(role, metric)].add(v)

    def _fire(self, alarm: str, role: str | None, step: int, message: str, values: dict) -> list[dict]:
        if (alarm, role) in self.fired:
            return []
        self.fired.add((alarm, role))
        return [{"step": step, "event": "alarm", "alarm": alarm, "role": role, "message": message,
                 "values": {k: round(v, 4) if math.isfinite(v) else None for k, v in values.items()}}]

    # -- the three alarms ---------------------------------------------------------------
    def _amplification(self, step: int) -> list[dict]:
        out: list[dict] = []
        roles = {r for (r, _) in self.series}
        for role in sorted(self.parallel):
            if self.policy_of.get(role) in self.shared:
                continue  # amplification is the isolated-adapter mechanism
            for metric, label in (("ppl", "training perplexity"), ("r2", "E[(pi/mu)^2]")):
                s = self.series.get((role, metric))
                if s is None or not s.ready or not s.ratio() >= self.t.amp_ratio:
                    continue
                others = [self.series[(o, metric)] for o in roles - {role} if (o, metric) in self.series]
                flat = [o.ratio() for o in others if o.ready]
                if flat and all(x <= self.t.flat_ratio for x in flat):
                    out += self._fire("gradient_amplification", role, step,
                                      f"role {role!r} (parallel slots, own adapter): {label} is {s.ratio():.2f}x its "
                                      f"first value while the other roles stay within {max(flat):.2f}x",
                                      {"ratio": s.ratio(), "others_max_ratio": max(flat)})
                    break
        return out

    def _capture(self, step: int) -> list[dict]:
        out: list[dict] = []
        for roles in self.shared.values():
            for captured, toward in permutations(sorted(roles), 2):
                for feat, gap_min in self.t.min_gap.items():
                    c, d = self.series.get((captured, feat)), self.series.get((toward, feat))
                    if c is None or d is None or not (c.ready and d.ready):
                        continue
                    gap0 = abs(c.start - d.start)
                    if gap0 < gap_min:
                        continue
                    gap_now, moved = abs(c.now - d.now), abs(c.now - c.start)
                    toward_d = (c.now - c.start) * (d.start - c.start) > 0
                    if gap_now <= self.t.capture_closing * gap0 and moved >= self.t.capture_move * gap0 and toward_d:
                        out += self._fire("sp_role_capture", captured, step,
                                          f"role {captured!r} output shape ({feat}) moved from {c.start:.2f} to "
                                          f"{c.now:.2f}, toward role {toward!r} ({d.now:.2f}) on the shared policy",
                                          {"first": c.start, "now": c.now, "other": d.now, "first_gap": gap0})
                        break
        return out

    def _validation(self, row: dict) -> list[dict]:
        acc = row["val/accuracy"]
        if acc is None or not math.isfinite(acc):
            return []
        se = _accuracy_se(row, acc)
        if acc > self.val_peak:
            self.val_peak, self.val_peak_se, self.cliff_armed = acc, se, True
            self.fired.discard(("validation_cliff", None))
            return []
        if not (self.cliff_armed and acc <= self.val_peak - self.t.cliff_margin):
            return []
        fall, z, nan = self.val_peak - acc, self.t.cliff_z, float("nan")
        noise, why = nan, ""
        if z > 0 and self.val_peak_se is not None and se is not None:
            noise = z * math.hypot(self.val_peak_se, se)  # z standard errors of the difference
            if not fall > noise:
                return []  # within the validation's sampling noise: stay armed for a deeper fall
            why = (f", more than the noise threshold {noise:.3f} ({z:g} x the se of the difference; "
                   f"se {self.val_peak_se:.3f} at the peak, {se:.3f} now)")
        elif z > 0:
            why = "; no standard error logged, so the margin alone"
        self.cliff_armed = False
        return self._fire("validation_cliff", None, row["step"],
                          f"validation accuracy {acc:.3f} is {fall:.3f} below its peak {self.val_peak:.3f}{why}",
                          {"accuracy": acc, "peak": self.val_peak, "fall": fall, "noise": noise,
                           "se_peak": nan if self.val_peak_se is None else self.val_peak_se,
                           "se_now": nan if se is None else se})


def _accuracy_se(row: dict, acc: float) -> float | None:
    """The row's standard error of val/accuracy: as logged, else binomial from val/n (a row
    written before the error was logged), else None."""
    se, n = row.get("val/accuracy_se"), row.get("val/n")
    if isinstance(se, (int, float)) and math.isfinite(se):
        return float(se)
    if isinstance(n, (int, float)) and n > 0:
        return math.sqrt(max(acc * (1 - acc), 0.0) / n)
    return None
