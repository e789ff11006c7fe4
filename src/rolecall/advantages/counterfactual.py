"""Counterfactual credit: what a turn changed, against what its role's default would have reached.

A selecting or judging role is paid, under outcome credit, for an outcome it mostly does not
change: when the candidates agree, the pick cannot matter, yet the picking turn's tokens get the
episode's full advantage. Counterfactual credit asks each turn what it changed instead (the
difference reward of "Optimal Payoff Functions for Members of Collectives"): its credit is the
episode's outcome minus the outcome the episode would have had with that turn replaced by its
role's stated default (`Workflow.counterfactuals`: a trivial selection rule, a judge that always
accepts, a participant keeping its previous answer or left out of a ballot). A turn that changes nothing gets exactly 0.

The credit already has its baseline (the default's outcome), so it is not centred on the group
mean: a group in which the role always beat its default keeps a positive advantage. Each group
(default: one problem's turns of one role) is only scaled, by the root mean square of its
credits, so advantages are on a comparable scale across groups; an all-zero group stays zero.
The trainer gives this estimator the credits as its rewards (`rolecall.algo.credit`); a turn
whose counterfactual could not be re-read arrives as None and gets 0, unless it is one of the
`replays` turns per step (option, default 0) that the trainer replays: the calls after it played
again from the episode's frozen context with the turn replaced by its default
(`Workflow.replay`), their cost logged (`cf/replay_*`).
"""
from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from rolecall.advantages.base import DEFAULT_EPS, group_members, positive_option


@dataclass(frozen=True)
class Counterfactual:
    name: str = "counterfactual"
    default_group_by: str = "role"
    eps: float = DEFAULT_EPS
    replays: float = 0.0  # turns per step replayed with model calls where nothing can be re-read

    # The credits this estimator reads are computed from the episode, not the turn's reward.
    needs_counterfactuals = True

    def __post_init__(self) -> None:
        positive_option("eps", self.eps)
        if self.replays < 0 or self.replays != int(self.replays):
            raise ValueError(f"algo.estimator_options.replays: a whole number >= 0, got {self.replays!r}")

    def compute(self, rewards_N: Sequence[float | None],
                group_ids_N: Sequence[Hashable]) -> tuple[list[float], dict[str, float]]:
        members = group_members(rewards_N, group_ids_N, what="credit", none_means="no counterfactual")
        adv_N = [0.0] * len(rewards_N)
        moved = 0
        for idx in members.values():
            credits = [(i, float(rewards_N[i])) for i in idx if rewards_N[i] is not None]  # type: ignore[arg-type]
            rms = math.sqrt(sum(c * c for _, c in credits) / len(credits)) if credits else 0.0
            if rms == 0.0:
                continue  # nothing in this group changed its outcome
            moved += 1
            for i, c in credits:
                adv_N[i] = c / (rms + self.eps)
        n = len(rewards_N)
        return adv_N, {"groups": float(len(members)),
                       "mixed_group_frac": moved / len(members) if members else 0.0,
                       "unscorable": float(sum(c is None for c in rewards_N)),
                       "adv_mean": sum(adv_N) / n if n else 0.0,
                       "adv_abs_mean": sum(abs(a) for a in adv_N) / n if n else 0.0}
