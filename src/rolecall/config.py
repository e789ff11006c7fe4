"""A run's config: YAML plus dotted `key=value` overrides, checked field by field (`rolecall.schema`)
and against what is installed (`rolecall.compose.checks`: the workflow's roles, the task's
verifier, the estimator, the trainer) before any model loads.

The typed sections are defined in `rolecall.schema` and importable from here too.
"""
from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from rolecall.compose.checks import check_config
from rolecall.metatrain.trainer import MetaPolicyTrainer
from rolecall.train.trainers import register, trainer_for
from rolecall.workflows import WORKFLOWS
from rolecall.errors import UserError, one_line
from rolecall.yamldata import DuplicateKeyError, safe_load_unique
from rolecall.schema import (AlarmsCfg, AlgoCfg, Config, DataCfg, LoraCfg, MetaPolicyCfg, ModelCfg, OptimCfg,
                             PolicyCfg, PolicyLoraCfg, PolicyOptimCfg, RewardCfg, RolloutCfg, TaskCfg, TrainCfg,
                             WorkflowCfg, dump_config)

# Trainers that live with what they train, in packages below rolecall.train (which names none of
# them): registered here, where every config is checked, before any config is.
register(MetaPolicyTrainer(WORKFLOWS))

__all__ = ["AlarmsCfg", "AlgoCfg", "Config", "ConfigError", "DataCfg", "LoraCfg", "MetaPolicyCfg", "ModelCfg",
           "OptimCfg", "PolicyCfg", "PolicyLoraCfg", "PolicyOptimCfg", "RewardCfg", "RolloutCfg", "TaskCfg",
           "TrainCfg", "WorkflowCfg", "apply_overrides", "dump_config", "load_config", "read_config_tree",
           "set_dotted", "validate_config"]


class ConfigError(UserError, ValueError):
    """A config problem, phrased with the dotted path, the bad value and what is allowed."""


def set_dotted(tree: dict, dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = tree
    for k in keys[:-1]:
        node = node.setdefault(k, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{dotted}: {k!r} is not a section")
    node[keys[-1]] = value


def _parse_yaml(text: str, where: str) -> Any:
    """Plain YAML data only: safe_load builds no Python objects, so `!!python/...` tags are errors."""
    try:
        return safe_load_unique(text)
    except DuplicateKeyError as e:
        raise ConfigError(f"{where}: line {e.line}: {e.problem}; a key may appear once in a mapping") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{where}: not valid YAML data (plain values, lists and mappings only): {one_line(e)}") from None


def load_config(path: str | Path | None = None, overrides: list[str] = ()) -> Config:
    """YAML file (or defaults) + `a.b=value` overrides (values parsed as YAML scalars)."""
    tree = read_config_tree(path) if path is not None else {}
    before = (tree.get("workflow") or {}).get("name") if isinstance(tree.get("workflow"), dict) else None
    apply_overrides(tree, overrides)
    _drop_other_workflows_options(tree, before, overrides)
    return validate_config(tree)


def _drop_other_workflows_options(tree: dict, before: str | None, overrides: list[str]) -> None:
    """A file's `workflow.options` and `workflow.prompts` were written for its workflow: when an
    override swaps in a user workflow (`workflow.name=my_module:MyFlow` on a shipped config),
    they go, with a warning naming them, unless the overrides set them too. Otherwise the
    shipped workflow's options (`n_voters`, `role_format`) fail the user's constructor as
    unknown. Between shipped workflows they stay: the prompt sets are shared, and an option the
    new one lacks is an error that lists what it takes."""
    wf = tree.get("workflow")
    if before is None or not isinstance(wf, dict) or wf.get("name") in (None, before) or ":" not in str(wf["name"]):
        return
    keys = [str(o).partition("=")[0].strip() for o in overrides]
    dropped = []
    for field in ("options", "prompts"):
        if field in wf and not any(k == f"workflow.{field}" or k.startswith(f"workflow.{field}.") for k in keys):
            dropped.append(f"workflow.{field}={wf.pop(field)!r}")
    if dropped:
        warnings.warn(f"workflow.name: {wf['name']!r} replaces the file's {before!r}; its "
                      f"{', '.join(dropped)} were written for {before!r} and are not passed on "
                      "(set them as overrides to keep them)", stacklevel=2)


def read_config_tree(path: str | Path) -> dict:
    """The mapping a config file (or a shipped config's name, `examples/voting`) holds."""
    from rolecall.shipped_configs import existing_or_shipped

    p = existing_or_shipped(path, "config", ConfigError)
    tree = _parse_yaml(p.read_text("utf-8"), f"config file {str(p)!r}") or {}
    if not isinstance(tree, dict):
        raise ConfigError(f"config file {str(p)!r} must hold a mapping at the top level")
    return tree


def apply_overrides(tree: dict, overrides: list[str]) -> None:
    """`a.b=value` strings into `tree`, each value parsed as a YAML scalar (as on the command line)."""
    for item in overrides:
        if not isinstance(item, str):
            raise ConfigError(f"override {item!r}: expected a 'dotted.key=value' string")
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r}: expected dotted.key=value")
        set_dotted(tree, key.strip(), _parse_yaml(raw, f"override {item!r}") if raw.strip() else "")


def validate_config(tree: dict) -> Config:
    """A Config from a nested mapping, checked field by field and against what is installed
    (workflow, routing, task, verifier, estimator, trainer); `ConfigError` naming each dotted path at fault."""
    try:
        cfg = Config.model_validate(tree)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e)) from None
    try:
        team = check_config(cfg)
        trainer_for(cfg).check(cfg, team)
    except ValueError as e:
        # A failure in the user's own code (a workflow module that does not import) keeps its
        # cause, so ROLECALL_TRACEBACK=1 (rolecall --debug) shows where; the rest needs none.
        raise ConfigError("invalid config:\n  " + str(e)) from e.__cause__
    return cfg


# pydantic's name for a Union member in an error location: `str`, `list[str]`, `literal['a','b']`.
_UNION_TAG = re.compile(r"^(str|int|float|bool|none|[a-z-]+\[.*\])$")


def format_validation_error(e: ValidationError) -> str:
    """One line per bad field: `dotted.path: what is wrong (got value)`.

    A field typed as a Union fails once per member with the member's type appended to the
    path (`routing.literal[...]`); those lines are merged into one under the real path.
    """
    msgs_by_path: dict[str, list[str]] = {}
    got_by_path: dict[str, str] = {}
    for err in e.errors():
        path = ".".join(str(x) for x in err["loc"] if not _UNION_TAG.match(str(x)))
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = f"unknown key; allowed here: {_section_fields(err['loc'][:-1])}"
        elif "input" in err and not isinstance(err["input"], dict):
            got_by_path.setdefault(path, f" (got {err['input']!r})")
        msgs = msgs_by_path.setdefault(path, [])
        if msg not in msgs:
            msgs.append(msg)
    lines = []
    for path, msgs in msgs_by_path.items():
        text = msgs[0] if len(msgs) == 1 else "none of the allowed forms fits: " + "; or ".join(msgs)
        text += got_by_path.get(path, "")
        # A message that names its own, deeper path (`workflow.options.alpha: ...`) stands alone.
        lines.append(f"{path}: {text}" if path and not text.startswith(f"{path}.") else text)
    return "invalid config:\n  " + "\n  ".join(lines)


def _section_fields(loc: tuple) -> list[str]:
    model: type[BaseModel] = Config
    for k in loc:
        field = model.model_fields.get(str(k))
        ann = getattr(field, "annotation", None) if field else None
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            return []
        model = ann
    return sorted(model.model_fields)
