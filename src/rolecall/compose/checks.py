"""The config checks that need what is installed: the task and its verifier, the estimator, the
workflow's roles and the routing over them, and the trainer's own rules.

`rolecall.config.validate_config` runs them after the field-level checks of `rolecall.schema`,
so a bad name fails before any model loads, naming the dotted path at fault.
"""
from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import yaml

from rolecall.advantages import check_estimators
from rolecall.compose.team import Team, build_team
from rolecall.errors import one_line
from rolecall.rewards.verifier import answer_from_readers
from rolecall.tasks import get_task
from rolecall.workflows import PROMPT_SETS

if TYPE_CHECKING:  # annotations only: the schema is checked, never built, here
    from rolecall.schema import Config


def check_config(cfg: "Config") -> Team:
    """ValueError naming the field at fault, else the run's workflow and routing."""
    _check_task(cfg)
    try:
        team = build_team(cfg)
    except (OSError, yaml.YAMLError) as e:  # an unreadable prompt file is the user's to fix
        raise ValueError(f"workflow.prompts: cannot read prompt file {cfg.workflow.prompts!r}: {one_line(e)}; "
                         f"allowed: a shipped set {list(PROMPT_SETS)} or a readable .yaml file") from None
    wf, routing = team.workflow, team.routing
    check_estimators(cfg.algo.estimator, cfg.algo.estimator_options, wf)
    unused = sorted(set(cfg.policies or {}) - set(routing.routes.values()))
    if unused:
        warnings.warn(f"policies: {unused} are played by no role of {wf.name!r} (roles -> policies: "
                      f"{routing.routes}); they are loaded but never used", UserWarning, stacklevel=4)
    for field, by_role in (("rollout.max_new_tokens_by_role", cfg.rollout.max_new_tokens_by_role),
                           ("algo.kl_coef_by_role", cfg.algo.kl_coef_by_role)):
        unknown = sorted(set(by_role) - set(wf.roles))
        if unknown:
            raise ValueError(f"{field}: {unknown} are not roles of {wf.name!r} {list(wf.roles)}")
    return team


def _check_task(cfg: "Config") -> None:
    task = get_task(cfg.task.name)
    if task.reads_data and not cfg.data.path:
        raise ValueError(f"data.path: required when task.name is {task.name!r} (a local file or directory)")
    if not task.reads_data and (cfg.data.path or cfg.data.val_path):
        raise ValueError(f"data.path is set but task.name is {cfg.task.name!r}; set task.name=dataset to train on it")
    want = task.reward_for(cfg)
    custom = ":" in cfg.reward.name  # a user's function grades whatever rows it is given
    if want is not None and cfg.reward.name != want and not custom:
        what = f"{cfg.data.format!r} rows are" if task.formats else f"the {task.name} task is"
        raise ValueError(f"reward.name: {what} graded by {want!r}, got {cfg.reward.name!r}")
    readers = answer_from_readers()
    if cfg.reward.answer_from != "boxed" and cfg.reward.name not in readers:
        raise ValueError(f"reward.answer_from: {cfg.reward.answer_from!r} is read only by {', '.join(readers)}; "
                         f"reward.name {cfg.reward.name!r} would ignore it (allowed with it: boxed)")
    if task.check is not None:  # the task's own checks against what is installed (a package, its options)
        task.check(cfg)
