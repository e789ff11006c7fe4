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
from rolecall.errors import TRACEBACK_HINT, code_error
from rolecall.yamldata import safe_load_unique
from rolecall.registry import defined, discover
from rolecall.workflows.base import Team, Workflow, WorkflowError, assistant, user

WORKFLOWS: dict[str, type[Workflow]] = {w.name: w for w in discover(__name__, defined(Workflow))}
# A shipped prompt set is one file in prompts/: its name is the file's stem.
PROMPT_SETS = tuple(sorted(p.name.removesuffix(".yaml") for p in resources.files("rolecall.workflows").joinpath("prompts").iterdir()
                           if p.name.endswith(".yaml")))

__all__ = ["WORKFLOWS", "Team", "Workflow", "WorkflowError", "assistant", "user", "load_prompts", "workflow_prompts",
           "resolve_workflow_class", "build_workflow"]


def load_prompts(name: str = "math") -> dict[str, str]:
    """A shipped prompt set by name, or a user YAML file path (data only, never executed; a key
    given twice is an error, as in a config file)."""

    if name.endswith((".yaml", ".yml")):
        with open(name, encoding="utf-8") as f:
            data = safe_load_unique(f.read())
    elif name in PROMPT_SETS:
        text = resources.files("rolecall.workflows").joinpath(f"prompts/{name}.yaml").read_text("utf-8")
        data = yaml.safe_load(text)
    else:
        code = name.endswith(".py") or ":" in name
        raise ValueError(f"workflow.prompts: unknown prompt set {name!r}; allowed: {list(PROMPT_SETS)} or a path "
                         "to a .yaml file" + ("; prompts are data, never a Python module: templates kept in "
                                              "Python go in the `prompts=` default of your workflow's constructor"
                                              if code else ""))
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
    The directory is appended (installed packages keep precedence) only when the module itself
    is not found; a module that is found but fails inside (a syntax error, an exception, a
    dependency it imports that is missing) raises its own error.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        cwd = os.getcwd()
        if e.name != module.split(".")[0] or cwd in sys.path or "" in sys.path:
            raise
    sys.path.append(cwd)  # outside the except: a failure inside the module is not "during" the miss
    return importlib.import_module(module)


def resolve_workflow_class(name: str) -> type[Workflow]:
    """A shipped workflow, or `package.module:ClassName` that the user names explicitly."""
    if name in WORKFLOWS:
        return WORKFLOWS[name]
    if ":" in name:
        module, _, attr = name.partition(":")
        try:
            mod = _import_user_module(module)
        except ModuleNotFoundError as e:
            if e.name is not None and module.startswith(e.name) and module[len(e.name):][:1] in ("", "."):
                # the module (or its package) itself is missing, not something it imports
                raise ValueError(f"workflow.name: cannot import user workflow {name!r}: no module named {e.name!r} "
                                 "(on sys.path or in the working directory)") from None
            raise ValueError(f"workflow.name: cannot import {name!r}: {code_error(e)} ({TRACEBACK_HINT})") from e
        except Exception as e:  # noqa: BLE001 - the user's module failed inside: one line, cause kept for --debug
            raise ValueError(f"workflow.name: cannot import {name!r}: {code_error(e)} ({TRACEBACK_HINT})") from e
        cls = getattr(mod, attr, None)
        if cls is None:
            raise ValueError(f"workflow.name: cannot import user workflow {name!r}: module {module!r} "
                             f"({getattr(mod, '__file__', None) or 'no file'}) has no attribute {attr!r}")
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
    try:
        wf = cls(prompts, **options)
    except Exception as e:
        if isinstance(e, ValueError) or name in WORKFLOWS:  # its own message / a bug in rolecall: as it is
            raise
        # the user's constructor failed: one line naming their file and line, cause kept for --debug
        raise ValueError(f"workflow.name: {name!r} failed in its constructor (workflow.options {options}): "
                         f"{code_error(e)} ({TRACEBACK_HINT})") from e
    check_role_diagnostics(wf)
    return wf


def check_role_diagnostics(wf: Workflow) -> None:
    """Every extra diagnostic a workflow asks for exists (ValueError naming it otherwise)."""

    for role, names in wf.role_diagnostics.items():
        unknown = sorted(set(names) - set(ROLE_DIAGNOSTICS))
        if unknown:
            raise ValueError(f"workflow {wf.name!r}: role_diagnostics of {role!r} names unknown diagnostics {unknown}; "
                             f"allowed: {sorted(ROLE_DIAGNOSTICS)}")
