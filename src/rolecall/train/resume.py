"""Where a run starts: a new run directory, or the latest sound checkpoint of an old one.

Both run on rank 0 only (`Ranks.on_lead`); damaged checkpoints and logs are evidence, so a
resume refuses before anything loads or changes, unless told to set them aside.
"""
from __future__ import annotations

import warnings
from pathlib import Path

from rolecall.errors import UserError
from rolecall.rundir.checkpoint import (CheckpointDamaged, ResumePoint, checkpoint_fingerprint, discard_partial,
                                        load_checkpoint, resume_point, set_aside)
from rolecall.rundir.directory import RunDir
from rolecall.rundir.fingerprint import check_resume
from rolecall.schema import Config
from rolecall.train.session import Launch
from rolecall.train.stack import Stack


class RunDirMissing(UserError, FileNotFoundError):
    """--resume names a directory that holds no run."""


def open_run_dir(cfg: Config, run: RunDir, launch: Launch) -> tuple[ResumePoint | None, int]:
    """Before anything loads: a new run's directory, or the resume point of an old one and the
    last step it logged. A damaged newer checkpoint is refused unless `skip_damaged`."""
    if not launch.resume:
        run.create(cfg)
        return None, 0
    logged = max((r["step"] for r in run.check_logs()), default=0)
    point = resume_point(run.path)
    if point.damaged_newer and not launch.skip_damaged:
        raise CheckpointDamaged(point.refusal(run.path))
    for p, why in point.damaged_older:
        launch.notify(f"note: older checkpoint {p.name} is damaged ({why}); left where it is")
    return point, logged


def restore(cfg: Config, run: RunDir, stack: Stack, point: ResumePoint | None, logged: int, fingerprint: dict,
            launch: Launch) -> tuple[Path | None, int, bool]:
    """Load the checkpoint and make the run directory match it; (checkpoint, step, whether the
    run already keeps that step's validation)."""
    notify, start = launch.notify, 0
    if point is not None:
        if point.checkpoint is not None:  # refuse before anything in the run directory changes
            for diff in check_resume(checkpoint_fingerprint(point.checkpoint), fingerprint, force=launch.force):
                warnings.warn(f"--force: resuming although {diff}", stacklevel=2)
            start = load_checkpoint(point.checkpoint, stack.models_by_adapter(), stack.optims, stack.routing.adapters)
        if point.damaged_newer:
            dest = set_aside(run.path, point, (run.metrics, run.samples, run.val_samples))
            notify(f"moved damaged {', '.join(p.name for p, _ in point.damaged_newer)} to {dest} "
                   f"(with a copy of metrics and samples as they were); resuming from step {start}")
        if logged > start:
            notify(f"resuming from step {start}: steps {start + 1}-{logged}, logged after that checkpoint, "
                   "are run again")
        discard_partial(run.path, newer_than=start)  # a killed save's temp dirs, a crashed run's later steps
        run.truncate_after(start)
    if start >= cfg.train.steps:
        notify(f"the run is already at step {start} of train.steps={cfg.train.steps}: nothing to train "
               "(pass --steps N to go further)")
    run.write_fingerprint(fingerprint)  # every checkpoint of this run embeds it
    kept = run.rows()  # after truncation: what the run keeps
    return (point.checkpoint if point is not None else None), start, any(
        r["step"] == start and "val/accuracy" in r for r in kept)

