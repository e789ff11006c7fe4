"""Shared contract for advantage estimators and the grouped z-score they build on."""
from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
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


def group_members(values_N: Sequence[float | None], group_ids_N: Sequence[Hashable],
                  what: str = "reward", none_means: str = "unscorable") -> dict[Hashable, list[int]]:
    """{group id: the indices in it}; ValueError for mismatched lengths or a non-finite value."""
    if len(values_N) != len(group_ids_N):
        raise ValueError(f"rewards_N has {len(values_N)} entries but group_ids_N has {len(group_ids_N)}")
    members: dict[Hashable, list[int]] = {}
    for i, (r, g) in enumerate(zip(values_N, group_ids_N)):
        if r is not None and not math.isfinite(r):
            raise ValueError(f"{what} {r!r} at index {i} is not finite; use None for {none_means}")
        members.setdefault(g, []).append(i)
    return members


def grouped(
    rewards_N: Sequence[float | None],
    group_ids_N: Sequence[Hashable],
    shape: Callable[[list[float]], list[float]],
) -> tuple[list[float], dict[str, float]]:
    """Advantages from `shape(rewards of one group) -> their advantages`, group by group.

    What every estimator shares: `None` rewards are unscorable, left out of their group's
    statistics and given 0.0, because a crashed verifier says nothing about the turn; a
    group with fewer than two distinct scorable rewards gets exactly 0.0 (nothing to compare);
    a non-finite reward is an error (a NaN would silently poison a whole group).
    """
    members = group_members(rewards_N, group_ids_N)
    adv_N = [0.0] * len(rewards_N)
    mixed = 0
    for idx in members.values():
        scored = [i for i in idx if rewards_N[i] is not None]
        values = [float(rewards_N[i]) for i in scored]  # type: ignore[arg-type]
        if len(set(values)) < 2:
            continue  # nothing to compare: exactly 0 (float round-off in a mean would not be)
        mixed += 1
        for i, a in zip(scored, shape(values)):
            adv_N[i] = a

    n = len(adv_N)
    metrics = {
        "groups": float(len(members)),
        "mixed_group_frac": mixed / len(members) if members else 0.0,
        "unscorable": float(sum(r is None for r in rewards_N)),
        "adv_mean": sum(adv_N) / n if n else 0.0,
        "adv_abs_mean": sum(abs(a) for a in adv_N) / n if n else 0.0,
    }
    return adv_N, metrics


def zscore(values: list[float], eps: float = DEFAULT_EPS) -> list[float]:
    """(r - mean) / (unbiased std + eps): GRPO's normalisation of one group."""
    mean, std = statistics.fmean(values), statistics.stdev(values)
    return [(r - mean) / (std + eps) for r in values]


def group_normalize(
    rewards_N: Sequence[float | None],
    group_ids_N: Sequence[Hashable],
    *,
    eps: float = DEFAULT_EPS,
) -> tuple[list[float], dict[str, float]]:
    """A = (r - mean_g) / (unbiased std_g + eps) over the scorable members of each group."""
    return grouped(rewards_N, group_ids_N, lambda v: zscore(v, eps))


def positive_option(name: str, value: float) -> None:
    if not value > 0:
        raise ValueError(f"algo.estimator_options.{name}: must be > 0, got {value!r}")


@dataclass(frozen=True)
class GroupShaped:
    """An estimator that turns each group's scorable rewards into advantages on its own
    (`shape`), through `grouped`: subclasses give `name`, maybe `default_group_by`, `shape`."""

    name: str = ""
    default_group_by: str = "slot"

    def shape(self, values: list[float]) -> list[float]:  # pragma: no cover - abstract
        raise NotImplementedError

    def compute(self, rewards_N: Sequence[float | None], group_ids_N: Sequence[Hashable]) -> tuple[list[float], dict[str, float]]:
        return grouped(rewards_N, group_ids_N, self.shape)
