"""Shared contract for advantage estimators and the grouped z-score they build on."""
from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Sequence
from typing import Protocol

DEFAULT_EPS = 1e-6


class Estimator(Protocol):
    """What the trainer calls: turn rewards + explicit group ids -> per-turn advantages.

    `default_group_by` names the Turn field ("slot", "role", ...) whose value, paired
    with the problem uid, the caller uses to build `group_ids_N`.
    """

    name: str
    default_group_by: str

    def compute(
        self, rewards_N: Sequence[float | None], group_ids_N: Sequence[Hashable]
    ) -> tuple[list[float], dict[str, float]]: ...


def group_normalize(
    rewards_N: Sequence[float | None],
    group_ids_N: Sequence[Hashable],
    *,
    eps: float = DEFAULT_EPS,
) -> tuple[list[float], dict[str, float]]:
    """A = (r - mean_g) / (unbiased std_g + eps) over the scorable members of each group.

    `None` rewards are unscorable: left out of their group's statistics and given 0.0,
    because a crashed verifier says nothing about the turn. A group with fewer than
    two scorable members gets 0.0 (its std is undefined).
    """
    if len(rewards_N) != len(group_ids_N):
        raise ValueError(f"rewards_N has {len(rewards_N)} entries but group_ids_N has {len(group_ids_N)}")
    members: dict[Hashable, list[int]] = {}
    for i, (r, g) in enumerate(zip(rewards_N, group_ids_N)):
        # A NaN would silently poison a whole group's mean; fail loudly instead.
        if r is not None and not math.isfinite(r):
            raise ValueError(f"reward {r!r} at index {i} is not finite; use None for unscorable")
        members.setdefault(g, []).append(i)

    adv_N = [0.0] * len(rewards_N)
    mixed = 0
    for idx in members.values():
        scored = [i for i in idx if rewards_N[i] is not None]
        values = [float(rewards_N[i]) for i in scored]  # type: ignore[arg-type]
        if len(set(values)) > 1:
            mixed += 1
        if len(values) < 2:
            continue
        mean, std = statistics.fmean(values), statistics.stdev(values)
        for i, r in zip(scored, values):
            adv_N[i] = (r - mean) / (std + eps)

    n = len(adv_N)
    metrics = {
        "groups": float(len(members)),
        "mixed_group_frac": mixed / len(members) if members else 0.0,
        "unscorable": float(sum(r is None for r in rewards_N)),
        "adv_mean": sum(adv_N) / n if n else 0.0,
        "adv_abs_mean": sum(abs(a) for a in adv_N) / n if n else 0.0,
    }
    return adv_N, metrics
