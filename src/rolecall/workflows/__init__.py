"""Workflows: async programs that route one problem through roles. Registry and loading.

A shipped workflow is one file in this folder defining a `Workflow` subclass with a `name`;
it is found there (`rolecall.registry.discover`). A user's workflow needs no file here at all:
`workflow.name=package.module:Class`.
"""
from __future__ import annotations

import importlib
import inspect
import os
import sys
from importlib import resources
from typing import Any

import yaml

from rolecall.diagnostics.trajectory import ROLE_DIAGNOSTICS
from rolecall.registry import defined, discover
from rolecall.workflows.base import Team, Workflow, WorkflowError, assistant, user

WORKFLOWS: dict[str, type[Workflow]] = {w.name: w for w in discover(__name__, defined(Workflow))}
# A shipped prompt set is one file in prompts/: its name is the file's stem.
PROMPT_SETS = tuple(sorted(p.name.removesuffix(".yaml") for p in resources.files("rolecall.workflows").joinpath("prompts").iterdir()
                           if p.name.endswith(".yaml")))

__all__ = ["WORKFLOWS", "Team", "Workflow", "WorkflowError", "assistant", "user", "load_prompts", "workflow_prompts",
           "resolve_workflow_class", "build_workflow"]


def load_prompts(name: str = "math") -> dict[str, str]:
    """A shipped prompt set by name, or a user YAML file path (data only, never executed)."""
    if name.endswith((".yaml", ".yml")):
        with open(name, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    elif name in PROMPT_SETS:
        text = resources.files("rolecall.workflows").joinpath(f"prompts/{name}.yaml").read_text("utf-8")
        data = yaml.safe_load(text)
    else:
        raise ValueError(f"workflow.prompts: unknown prompt set {name!r}; "
                         f"allowed: {list(PROMPT_SETS)} or a path to a .yaml file")
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise ValueError(f"workflow.prompts: {name!r} must map template names to strings")
    return data


def workflow_prompts(name: str, prompts: str | None) -> dict[str, str]:
    """The prompts a run uses: `prompts` if given (a shipped set or a .yaml path); otherwise the
    workflow's own default (a mapping given as the `prompts=` default of its constructor, as a
    user's workflow may ship its templates in Python), else the shipped 'math' set."""
    if prompts is not None:
        return load_prompts(prompts)
    default = inspect.signature(resolve_workflow_class(name).__init__).parameters.get("prompts")
    if default is not None and isinstance(default.default, dict):
        own = dict(default.default)
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in own.items()):
            raise ValueError(f"workflow.prompts: the default prompts of {name!r} must map template names to strings")
        return own
    return load_prompts("math")


def _import_user_module(module: str):
    """Import `module`, also from the working directory as `python -m` would.

    The `rolecall` console script puts its own bin directory, not the working directory,
    on sys.path, so `examples.my_workflow` next to the user would otherwise not be found.
    The directory is appended (installed packages keep precedence) only when needed.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        cwd = os.getcwd()
        if e.name != module.split(".")[0] or cwd in sys.path or "" in sys.path:
            raise
        sys.path.append(cwd)
        return importlib.import_module(module)


def resolve_workflow_class(name: str) -> type[Workflow]:
    """A shipped workflow, or `package.module:ClassName` that the user names explicitly."""
    if name in WORKFLOWS:
        return WORKFLOWS[name]
    if ":" in name:
        module, _, attr = name.partition(":")
        try:
            cls = getattr(_import_user_module(module), attr)
        except (ImportError, AttributeError) as e:
            raise ValueError(f"workflow.name: cannot import user workflow {name!r}: {e}") from None
        if not (inspect.isclass(cls) and issubclass(cls, Workflow)):
            raise ValueError(f"workflow.name: {name!r} is not a rolecall Workflow subclass")
        return cls
    raise ValueError(f"workflow.name: unknown workflow {name!r}; allowed: {sorted(WORKFLOWS)} "
                     "or 'module:Class' for a user workflow")


def build_workflow(name: str, prompts: dict[str, str], options: dict[str, Any]) -> Workflow:
    cls = resolve_workflow_class(name)
    params = inspect.signature(cls.__init__).parameters
    allowed = [p for p in params if p not in ("self", "prompts")]
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"workflow.options: unknown option(s) {unknown} for {name!r}; allowed: {allowed}")
    wf = cls(prompts, **options)
    check_role_diagnostics(wf)
    return wf


def check_role_diagnostics(wf: Workflow) -> None:
    """Every extra diagnostic a workflow asks for exists (ValueError naming it otherwise)."""

    for role, names in wf.role_diagnostics.items():
        unknown = sorted(set(names) - set(ROLE_DIAGNOSTICS))
        if unknown:
            raise ValueError(f"workflow {wf.name!r}: role_diagnostics of {role!r} names unknown diagnostics {unknown}; "
                             f"allowed: {sorted(ROLE_DIAGNOSTICS)}")
