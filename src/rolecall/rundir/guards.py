"""Run-level guard against non-finite values: count them per step, halt on a streak.

A NaN/Inf loss, gradient or update (a NaN/Inf learning rate, or a step that would leave a
weight NaN/Inf) skips its update (see `update.py`) and a NaN/Inf reward is
excluded from the advantages (see `rolecall.algo.scoring.score`), so one bad step costs nothing but
its data. Many in a row mean the run is broken (a diverged adapter, a broken reward
function); `NonFiniteStreak` turns that into an error naming the step and the source.
"""
from __future__ import annotations

from rolecall.errors import UserError
from rolecall.types import NONFINITE, Episode

# Per-policy update metrics (from `update_policy`) that count skipped mini-batches.
_POLICY_SOURCES = {"nonfinite_loss": "loss", "nonfinite_grad": "gradient", "nonfinite_update": "update"}


class NonFiniteHalt(UserError, RuntimeError):
    """Several training steps in a row had a NaN/Inf loss, gradient or reward."""


def nonfinite_counts(episodes: list[Episode], policy_metrics: dict[str, dict]) -> dict[str, float]:
    """The step's `nonfinite/*` metrics: episodes with a non-finite reward, and mini-batches
    skipped for a non-finite loss, gradient or update, summed over policies."""
    counts = {"nonfinite/reward": float(sum(ep.status == NONFINITE for ep in episodes)),
              "nonfinite/loss": 0.0, "nonfinite/grad": 0.0, "nonfinite/update": 0.0}
    for pol in policy_metrics.values():
        counts["nonfinite/loss"] += pol.get("nonfinite_loss", 0)
        counts["nonfinite/grad"] += pol.get("nonfinite_grad", 0)
        counts["nonfinite/update"] += pol.get("nonfinite_update", 0)
    return counts


def nonfinite_sources(row: dict) -> list[str]:
    """What was non-finite in a step's metrics row, in words: `gradient of policy 'solver'`."""
    sources = []
    for key, value in row.items():
        parts = key.split("/")
        if len(parts) == 3 and parts[0] == "policy" and parts[2] in _POLICY_SOURCES and value:
            sources.append(f"{_POLICY_SOURCES[parts[2]]} of policy {parts[1]!r}")
    bad_rewards = int(row.get("nonfinite/reward", 0))
    if bad_rewards:
        sources.append(f"reward of {bad_rewards} episode{'s' if bad_rewards > 1 else ''}")
    return sources


class NonFiniteStreak:
    """Counts consecutive steps with a non-finite event; the `limit`-th one is an error."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.steps = 0

    def observe(self, step: int, row: dict) -> NonFiniteHalt | None:
        """Update the streak with one step's row; the error to raise once the streak reaches the limit."""
        sources = nonfinite_sources(row)
        self.steps = self.steps + 1 if sources else 0
        if self.steps < self.limit:
            return None
        return NonFiniteHalt(
            f"halted at step {step}: {self.steps} steps in a row had non-finite values (source: {', '.join(sources)}). "
            f"Non-finite updates were skipped, so no weight or optimizer state holds a NaN/Inf; a checkpoint of "
            f"step {step} was saved. Lower optim.lr or optim.grad_clip, or fix the reward function, then --resume "
            f"(train.max_nonfinite_steps sets how many such steps in a row are tolerated).")
