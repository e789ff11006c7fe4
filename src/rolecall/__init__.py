"""rolecall: train multi-agent LLM workflows with reinforcement learning, role by role.

The library API (`rolecall.api`; loaded on first use, so `import rolecall` stays light):

    rolecall.make_config(source, overrides) -> Config     a dict, a YAML path or a shipped name
    rolecall.train_run(cfg, out, steps=...) -> Run        blocks until done; also inside a running event loop
    rolecall.evaluate(run_or_cfg)           -> dict       validation metrics
    rolecall.read_run(path)                 -> Run        .config, .metrics, .summary, .latest_checkpoint
    rolecall.generate(run, role, prompt)    -> str        one role's reply with the trained weights
    rolecall.export_run(run, out, merge=)   -> [Path]     adapters (or merged models) for use elsewhere

(`rolecall.config` and `rolecall.train` are the modules behind them.)
"""
from __future__ import annotations

import importlib

from rolecall.version import __version__

_API = {"make_config", "train_run", "evaluate", "read_run", "Run", "generate"}
_TYPES = {"Config": "rolecall.config", "ConfigError": "rolecall.config", "Workflow": "rolecall.workflows",
          "Team": "rolecall.workflows", "Problem": "rolecall.types", "Episode": "rolecall.types"}

__all__ = ["__version__", "export_run", *sorted(_API), *sorted(_TYPES)]


def __getattr__(name: str):
    if name in _API:
        return getattr(importlib.import_module("rolecall.api"), name)
    if name == "export_run":
        return importlib.import_module("rolecall.export").export_run
    if name in _TYPES:
        return getattr(importlib.import_module(_TYPES[name]), name)
    raise AttributeError(f"module 'rolecall' has no attribute {name!r}")
