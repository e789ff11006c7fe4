"""Registry of advantage estimators, looked up by the name used in configs.

An estimator is one file in this folder defining a class with a `name` and
`compute(rewards, groups)` (`base.Estimator`); it is found there (`rolecall.registry.discover`).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from rolecall.advantages.agentwise import AgentWise
from rolecall.advantages.base import Estimator, group_normalize, grouped
from rolecall.advantages.drgrpo import DrGRPO
from rolecall.advantages.grpo import GRPO
from rolecall.advantages.rloo import RLOO
from rolecall.advantages.softrank import SoftRank
from rolecall.advantages.turnwise import TurnWise
from rolecall.registry import defined, discover

ESTIMATORS: dict[str, Estimator] = {cls.name: cls() for cls in discover(__name__, defined(object))
                                    if callable(getattr(cls, "compute", None))}
_FIXED = ("name", "default_group_by")  # what an estimator is, not how it is tuned


def estimator_options(name: str) -> dict[str, Any]:
    """The options `algo.estimator_options` may set for estimator `name`, with their defaults."""
    est = get_estimator(name)
    return {f.name: getattr(est, f.name) for f in dataclasses.fields(est) if f.name not in _FIXED}


def get_estimator(name: str, options: dict[str, Any] | None = None) -> Estimator:
    """The registered estimator called `name`, tuned by `options`; a typo, an unknown option or
    a bad value fails here (at config load), not mid-training."""
    try:
        est = ESTIMATORS[name]
    except KeyError:
        raise ValueError(f"unknown advantage estimator {name!r}; allowed: {sorted(ESTIMATORS)}") from None
    if not options:
        return est
    allowed = estimator_options(name)
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"algo.estimator_options: unknown option(s) {unknown} for {name!r}; "
                         f"allowed: {sorted(allowed) or 'none'}")
    for key, value in options.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"algo.estimator_options.{key}: must be a number, got {value!r}")
    return dataclasses.replace(est, **{k: float(v) for k, v in options.items()})


DEFAULT_ROLE = "*"  # in a per-role estimator mapping: every role not named
DEFAULT_ESTIMATOR = "grpo"


def estimator_of_roles(estimator: str | dict[str, str], roles) -> dict[str, str]:
    """role -> the estimator its turns use: one for every role, or per role (`*`, else GRPO, for the
    roles a mapping does not name)."""
    if isinstance(estimator, str):
        return {r: estimator for r in roles}
    rest = estimator.get(DEFAULT_ROLE, DEFAULT_ESTIMATOR)
    return {r: estimator.get(r, rest) for r in roles}


def options_of(name: str, options: dict | None, per_role: bool) -> dict | None:
    """The options of estimator `name`: `algo.estimator_options` itself, or with a per-role mapping
    its entry for that estimator ({softrank: {tau: 0.8}})."""
    if not options:
        return None
    return options.get(name) if per_role else options


def check_estimators(estimator: str | dict[str, str], options: dict, workflow) -> None:
    """ValueError naming what is wrong: an unknown estimator or role, options in the wrong shape, or
    counterfactual credit for a role whose turns the workflow cannot re-read."""
    per_role = not isinstance(estimator, str)
    names = list(estimator.values()) if per_role else [estimator]
    if per_role and not estimator:
        raise ValueError("algo.estimator: an empty mapping; name one estimator, or one per role ({role: name, '*': name})")
    for name in names:
        if name not in ESTIMATORS:
            raise ValueError(f"algo.estimator: unknown {name!r}; allowed: {sorted(ESTIMATORS)}")
    if per_role:
        unknown = sorted(set(estimator) - set(workflow.roles) - {DEFAULT_ROLE})
        if unknown:
            raise ValueError(f"algo.estimator: {unknown} are not roles of {workflow.name!r} {list(workflow.roles)}")
    flat = [k for k, v in options.items() if isinstance(v, dict) != per_role]
    if flat:
        how = "by estimator, e.g. {softrank: {tau: 0.8}}" if per_role else "as numbers, e.g. {tau: 0.8}"
        raise ValueError(f"algo.estimator_options.{flat[0]}: with {'one estimator per role' if per_role else 'one estimator'} "
                         f"give the options {how}")
    for name in set(names) | set(options if per_role else ()):
        get_estimator(name, options_of(name, options, per_role))  # unknown options, bad values
    plan = estimator_of_roles(estimator, workflow.roles)
    cf = [r for r, n in plan.items() if getattr(ESTIMATORS[n], "needs_counterfactuals", False)]
    replays = cf and getattr(get_estimator(plan[cf[0]], options_of(plan[cf[0]], options, per_role)), "replays", 0)
    able_roles = set(workflow.counterfactual_roles) | (set(workflow.replay_roles) if replays else set())
    missing = [r for r in cf if r not in able_roles]
    if missing:
        able = [r for r in cf if r in able_roles]
        hint = (f"e.g. {{{', '.join(f'{r}: counterfactual' for r in able)}, '*': grpo}}" if able
                else "another estimator for them")
        raise ValueError(f"algo.estimator: counterfactual credit for role(s) {missing}, but workflow {workflow.name!r} "
                         f"re-reads no default for their turns (it does for: {list(workflow.counterfactual_roles) or 'none'}"
                         + (f"; with estimator option replays > 0 it replays: {list(workflow.replay_roles)}"
                            if workflow.replay_roles else "") + "); "
                         f"use {hint}")


__all__ = ["ESTIMATORS", "Estimator", "AgentWise", "DrGRPO", "GRPO", "RLOO", "SoftRank", "TurnWise",
           "check_estimators", "estimator_of_roles", "estimator_options", "get_estimator", "group_normalize",
           "grouped", "options_of"]
