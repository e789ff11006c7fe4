"""rolecall as a library: build a config, train, evaluate and read a run from Python.

    import rolecall

    cfg = rolecall.make_config({"workflow": {"name": "voting"}}, {"train.steps": 20})
    run = rolecall.train(cfg, out="runs/voting")      # blocks; returns a Run
    print(run.summary["accuracy"]["final"], run.metrics[-1])
    print(rolecall.evaluate(run))                     # validation metrics of its latest checkpoint

Everything works from a notebook too: training inside a running asyncio event loop (Jupyter's)
runs its rollouts on a helper thread. The CLI is a thin layer over these functions.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rolecall.config import (Config, ConfigError, apply_overrides, load_config, read_config_tree, set_dotted,
                             validate_config)

def make_config(source: Config | Mapping[str, Any] | str | os.PathLike | None = None,
           overrides: Mapping[str, Any] | Sequence[str] = ()) -> Config:
    """A validated `Config` from a dict (nested like the YAML), a YAML path or shipped config
    name (`examples/voting`), an existing Config, or None (the embedded default), with
    `overrides` as {"dotted.key": value} or ["dotted.key=value", ...] (strings parsed as YAML,
    as on the command line). Raises `ConfigError` naming the dotted path at fault."""
    if isinstance(source, Config):
        tree = source.model_dump(mode="json", exclude_unset=True)
    elif isinstance(source, Mapping):
        tree = json.loads(json.dumps(dict(source)))  # a deep copy: the caller's dict is never changed
    elif source is None:
        tree = {}
    else:
        tree = read_config_tree(source)
    if isinstance(overrides, Mapping):
        for key, value in overrides.items():
            set_dotted(tree, key, value)
    elif isinstance(overrides, str):
        raise ConfigError("overrides: expected {'dotted.key': value} or a list of 'dotted.key=value' strings")
    else:
        apply_overrides(tree, list(overrides))
    return validate_config(tree)


@dataclass(frozen=True)
class Run:
    """A run directory, read on demand (a run still training shows its latest rows)."""

    path: Path

    @property
    def config(self) -> Config:
        return load_config(self.path / "config.yaml")

    @property
    def metrics(self) -> list[dict]:
        """metrics.jsonl rows (a torn last line from a kill is skipped)."""
        from rolecall.diagnostics.metrics_log import read_metrics

        return read_metrics(self.path / "metrics.jsonl")[0]

    @property
    def summary(self) -> dict:
        """summary.json (written at the end of training, and of a halted run)."""
        return json.loads((self.path / "summary.json").read_text())

    @property
    def latest_checkpoint(self) -> Path | None:
        from rolecall.rundir.checkpoint import latest_checkpoint

        return latest_checkpoint(self.path)


def read_run(path: str | os.PathLike) -> Run:
    """The run in `path` (ValueError if it holds none)."""
    p = Path(path)
    if not (p / "config.yaml").is_file():
        raise ValueError(f"{str(p)!r} is not a run directory (no config.yaml)")
    return Run(p)


def train_run(cfg: Config | Mapping[str, Any] | str | os.PathLike | None = None, out: str | os.PathLike | None = None, *,
          steps: int | None = None, resume: bool = False, force: bool = False, skip_damaged: bool = False,
          on_event: Callable[[str, dict], None] | None = None,
          notify: Callable[[str], None] | None = None) -> Run:
    """Train (or with `resume`, continue) into `out` (default runs/<workflow>-<time>) and return the Run.

    `on_event(kind, row)` sees every metrics row as it is logged ("step", "val", "alarm", ...);
    `notify(text)` gets the messages the CLI prints (default: stderr). `force` resumes onto a
    changed model, data, workflow, routing or reward; `skip_damaged` sets damaged checkpoints aside.
    """
    import time

    from rolecall.train.launch import train as run_train

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if resume and out is None:
        raise ValueError("resume=True needs out=, the run directory to continue")
    if resume and cfg is None:
        cfg = make_config(Path(out) / "config.yaml")
    elif not isinstance(cfg, Config):
        cfg = make_config(cfg)
    if steps is not None:
        cfg = make_config(cfg, {"train.steps": steps})
    out = Path(out) if out is not None else Path("runs") / f"{cfg.workflow.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    return Run(run_train(cfg, out, resume=resume, force=force, skip_damaged=skip_damaged, on_event=on_event,
                         notify=notify))


def evaluate(target: Run | Config | Mapping[str, Any] | str | os.PathLike | None = None, *,
             base: bool = False, overrides: Mapping[str, Any] | Sequence[str] = (), best: bool = False,
             step: int | None = None, skip_damaged: bool = False,
             notify: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Validation metrics of a run's latest checkpoint (a run directory or Run; `overrides`
    change its config, e.g. more validation problems), of `step`'s, of its best validated one with
    `best` (`checkpoints/best.json`), or of a config's fresh (untrained) adapters; `base` evaluates
    the bare base model. A damaged latest checkpoint is refused unless `skip_damaged` (then the
    newest sound one, said through `notify`), as export and generate do. Adds "checkpoint"."""
    from rolecall.rundir.checkpoint import checkpoint_of, load_adapters
    from rolecall.train.stack import build_stack
    import sys

    from rolecall.train.step import evaluation_notices, validate

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    run_dir = target.path if isinstance(target, Run) else None
    if isinstance(target, (str, os.PathLike)) and Path(target).is_dir():
        run_dir = read_run(target).path
    if best and base:
        raise ValueError("--best and --base choose different weights (the best checkpoint, the bare base model); pass one")
    if step is not None and base:
        raise ValueError("--step and --base choose different weights (a checkpoint, the bare base model); pass one")
    if (best or step is not None) and run_dir is None:
        what = "--best" if best else "--step"
        raise ValueError(f"{what} evaluates a run's checkpoint; {str(target)!r} is not a run directory")
    cfg = make_config(run_dir / "config.yaml" if run_dir else target, overrides)
    ckpt = None
    if run_dir and not base:
        ckpt = checkpoint_of(run_dir, step, best=best, skip_damaged=skip_damaged, notify=notify)
    stack = build_stack(cfg)
    try:
        if ckpt:
            load_adapters(ckpt, stack.models_by_adapter(), stack.routing.adapters)
        result = validate(stack, base=base)
        for text in evaluation_notices(stack, result):  # a custom reward's failures, mostly-unscorable samples
            (notify or (lambda t: print(t, file=sys.stderr)))(text)
    finally:
        stack.close()  # the math judge's worker, the code sandbox's leases
    result["checkpoint"] = str(ckpt) if ckpt else None
    return result


def generate(run: Run | str | os.PathLike, role: str, prompt: str, *, step: int | None = None,
             temperature: float = 0.0, max_new_tokens: int | None = None, best: bool = False,
             skip_damaged: bool = False, notify: Callable[[str], None] | None = None) -> str:
    """One role's reply to `prompt` (a single user message) with the run's trained weights
    (the latest checkpoint, `step`'s, or with `best` the best validated one; a damaged latest one is
    refused unless `skip_damaged`), through rolecall's own engine; temperature 0 = greedy."""
    import torch

    from rolecall.compose.parts import build_parts
    from rolecall.engines.base import GenRequest
    from rolecall.rundir.checkpoint import checkpoint_of, load_adapters

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    run = run if isinstance(run, Run) else read_run(run)
    cfg = run.config
    parts = build_parts(cfg)
    routing = parts.routing
    if role not in routing.routes:
        raise ValueError(f"--role: {role!r} is not a role of {cfg.workflow.name!r}; its roles are {list(routing.routes)}")
    ckpt = checkpoint_of(run.path, step, best=best, skip_damaged=skip_damaged, notify=notify)
    (base,) = parts.bases(parts.tokenizer(), only=parts.base_path(role)).values()  # the role's base (`base`: the run's)
    if base.adapters:
        load_adapters(ckpt, base.model, base.adapters)
    base.model.eval()
    engine = base.engine
    budget = max_new_tokens or cfg.rollout.max_new_tokens_by_role.get(role, cfg.rollout.max_new_tokens)
    with torch.no_grad():
        (out,) = engine.generate([GenRequest([{"role": "user", "content": prompt}], routing.routes[role], budget)],
                                 temperature=temperature)
    return out.completion_text
