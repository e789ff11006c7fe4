"""The run's best validation: which checkpoint to keep whatever `train.keep_last` says, and the
opt-in early stop when validation stays `train.stop_below_peak` below that peak.

The peak is the best `val/accuracy` of a trained step (step 0 measures the base model, which
no checkpoint holds, so it is never the peak). Its checkpoint is saved (whatever
`train.checkpoint_every` says) and named in `checkpoints/best.json`; retention never deletes it.
A resumed run recalls the peak and the count of validations below it from what the run keeps
(`recall_peak`): a run the early stop ended stops again at its next validation still that far
below, unless validation recovers.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from rolecall.rundir.checkpoint import best_mark, clear_best, is_complete, mark_best
from rolecall.rundir.directory import RunDir
from rolecall.schema import TrainCfg

METRIC = "val/accuracy"
PEAK, STOP = "peak", "stop"  # what a validation said: a new peak, or the early stop is due
_EPS = 1e-9  # 0.75 - 0.65 is 0.0999...: a value exactly the margin below counts as below


@dataclass
class Recalled:
    """What a resumed run knows of its past validations (nothing, for a new run)."""

    step: int | None = None
    value: float | None = None
    below: int = 0


class Peak:
    """The best validation so far and the streak of validations at least the margin below it.

    Every rank feeds it the same (gathered) validation metrics, so every rank decides alike."""

    def __init__(self, train: TrainCfg) -> None:
        self.margin, self.patience = train.stop_below_peak, train.stop_patience
        self.step: int | None = None
        self.value: float | None = None
        self.below = 0
        self.last: float | None = None  # the latest validation's value

    def recall(self, recalled: Recalled) -> None:
        self.step, self.value, self.below = recalled.step, recalled.value, recalled.below

    def observe(self, step: int, value: float) -> str | None:
        """PEAK when this validation is the new best (its step must be checkpointed and marked),
        STOP when the early stop is due, else None."""
        if step < 1 or not _finite(value):
            return None
        self.last = value
        # Strictly better only: on a tie the earlier checkpoint stays the best (it was trained
        # less, and keeping it saves a checkpoint and a marker rewrite).
        if self.value is None or value > self.value:
            self.step, self.value, self.below = step, value, 0
            return PEAK
        self.below = self.below + 1 if below_peak(self.margin, self.value, value) else 0
        return STOP if self.margin is not None and self.below >= self.patience else None

    def best(self, step: int) -> tuple[str, float] | None:
        """(metric, value) when `step` is the peak: what its save marks."""
        return (METRIC, self.value) if step == self.step and self.value is not None else None

    def stop_message(self, step: int, resume: str) -> str:
        return (f"train.stop_below_peak={self.margin:g}: {METRIC} was at least {self.margin:g} below its peak "
                f"{self.value:.3f} (step {self.step}) at {self.below} validations in a row "
                f"(train.stop_patience={self.patience}), {self.last:.3f} at step {step}. Stopped after step {step}: "
                f"checkpoint step_{step} is saved and the best, step_{self.step}, is kept (checkpoints/best.json). "
                f"{resume} trains on to the next validation and stops again unless it recovers")


def below_peak(margin: float | None, peak: float, value: float) -> bool:
    """Whether `value` is at least `margin` below `peak` (never, with no margin set)."""
    return margin is not None and peak - value >= margin - _EPS


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def recall_peak(run: RunDir, start: int, margin: float | None, notify: Callable[[str], None]) -> Recalled:
    """On rank 0, once a resume has cut the run back to `start`: the peak among the validations the
    run keeps whose checkpoint is still there, and the validations since it at least the margin
    below it. `checkpoints/best.json` is made to match (a kill may have landed between a save and
    its marker; a resume from an older checkpoint drops the later ones)."""
    vals: dict[int, float] = {}
    for r in run.rows():
        if "event" not in r and 1 <= r["step"] <= start and _finite(r.get(METRIC)):
            vals[r["step"]] = r[METRIC]  # a step logged twice keeps its last row
    ckpt = run.path / "checkpoints"
    kept = [(s, v) for s, v in sorted(vals.items()) if is_complete(ckpt / f"step_{s}")]
    best = max(kept, key=lambda sv: (sv[1], -sv[0]), default=None)  # ties: the earliest step
    mark = best_mark(run.path)
    if best is None:
        clear_best(run.path)  # it named a step the resume dropped (or the run kept none)
        return Recalled()
    if mark is None or mark.get("step") != best[0]:
        mark_best(run.path, best[0], METRIC, best[1])
    lost = max(vals.items(), key=lambda sv: (sv[1], -sv[0]))
    if lost[1] > best[1]:
        notify(f"note: {METRIC} peaked at {lost[1]:.3f} at step {lost[0]}, whose checkpoint is gone (pruned "
               f"by a rolecall that did not keep the best, or set aside); the best kept is step_{best[0]} ({best[1]:.3f})")
    below = 0  # the validations since the peak, replayed through the loop's rule with today's margin
    for s, v in sorted(vals.items()):
        if s > best[0]:
            below = below + 1 if below_peak(margin, best[1], v) else 0
    return Recalled(best[0], best[1], below)
