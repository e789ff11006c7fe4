"""The work of one cell: an RL run (runs and controls) or a base-model evaluation (base cells).

Both leave an ordinary run directory, so the report reads them alike: a base cell holds the
config, a one-row metrics.jsonl (the step-0 validation of the untrained model, adapters off,
what `rolecall eval --base` prints, also kept as eval.json) and its summary.json.
"""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from rolecall.schema import Config
from rolecall.grid.runner import CellJob, OnEvent
from rolecall.grid.spec import GridError


def run_cell(job: CellJob, on_event: OnEvent) -> None:
    """The default `CellRunner`."""
    if job.cell.kind == "base":
        evaluate_base(job.config, job.path, on_event)
    else:
        train_cell(job.config, job.path, on_event)


def _first_difference(old, new, prefix: str = "") -> tuple[str, object, object] | None:
    if isinstance(old, dict) and isinstance(new, dict):
        for k in list(old) + [k for k in new if k not in old]:
            diff = _first_difference(old.get(k), new.get(k), f"{prefix}{k}.")
            if diff:
                return diff
        return None
    return None if old == new else (prefix.rstrip("."), old, new)


def train_cell(cfg: Config, path: Path, on_event: OnEvent) -> None:
    """Train into `path`; a directory left by an earlier, unfinished attempt resumes from its checkpoint."""
    from rolecall.train.launch import train

    old = path / "config.yaml"
    resume = old.is_file()
    if resume:  # the grid file may have changed since: never continue a run under another config
        diff = _first_difference(yaml.safe_load(old.read_text("utf-8")), cfg.model_dump(mode="json"))
        if diff:
            key, was, now = diff
            raise GridError(f"{path} was started with {key}={was!r} but the grid now gives {now!r}; "
                            "remove that directory to start the cell over")
    train(cfg, path, resume=resume, on_event=on_event, notify=lambda text: on_event("notice", {"text": text}))


def evaluate_base(cfg: Config, path: Path, on_event: OnEvent) -> None:
    """Validation accuracy of the untrained model (adapters disabled), written as a run directory."""
    from rolecall.diagnostics.summary import write_summary
    from rolecall.train.stack import build_stack
    from rolecall.train.step import validate_episodes
    from rolecall.rundir.directory import RunDir, hold
    from rolecall.rundir.ownership import is_marked

    run = RunDir(path)
    with hold(path):
        if is_marked(path):  # an interrupted earlier attempt of this cell: start over
            for f in (run.metrics, run.samples, run.val_samples):
                f.unlink(missing_ok=True)
        stack = build_stack(cfg)
        try:
            run.create(cfg, held=True)  # every input has loaded: only now does the cell become a run
            metrics, episodes = validate_episodes(stack, base=True)
        finally:
            stack.close()  # the math judge's worker, the code sandbox's leases
        row = {"step": 0, **metrics}
        run.log(row)
        run.log_samples(0, episodes, cfg.train.val_samples, validation=True)
        on_event("val", row)
        (path / "eval.json").write_text(json.dumps({**metrics, "checkpoint": None, "base": True}, indent=2) + "\n")
        write_summary(path)
