"""`train(cfg, out)`: hold the run directory, join a torchrun process group if launched by one,
and hand the run to its trainer (`rolecall.train.trainers`)."""
from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from pathlib import Path

from rolecall.distributed.data_parallel import DataParallel
from rolecall.errors import UserError
from rolecall.rundir.directory import RunDir, hold
from rolecall.rundir.ownership import check_new_run_dir, is_run
from rolecall.rundir.stop import StopRequest
from rolecall.schema import Config
from rolecall.train.resume import RunDirMissing
from rolecall.train.session import Launch
from rolecall.train.trainers import trainer_for


def train(cfg: Config, out: Path, *, resume: bool = False, force: bool = False, skip_damaged: bool = False,
          on_event: Callable[[str, dict], None] | None = None, stop_after: int | None = None,
          notify: Callable[[str], None] | None = None) -> Path:
    """Run (or continue) training into `out`. `on_event(kind, row)` sees every logged row;
    `notify(text)` gets what the user should read (default: stderr).

    A new run's folder must be empty, missing or rolecall's own (`RunDirRefused` otherwise, before
    anything loads) and is made only once every input has loaded, so a bad model, tokenizer, task
    or reward leaves nothing behind. The run directory is held by this process from then (a resumed
    one for the whole call; `RunDirBusy` if another holds it). The first SIGINT/SIGTERM finishes the current step, saves a checkpoint and
    raises `TrainingStopped` naming it; a second one stops at once.
    `stop_after` ends the process early after that step (as a kill would, but cleanly);
    the schedule still follows `train.steps`, so a resume continues the same trajectory.
    A resume onto a different model, tokenizer, data, workflow, routing, LoRA or reward is
    refused (`ResumeRefused`) unless `force`; a resume past a damaged checkpoint is refused
    (`CheckpointDamaged`) unless `skip_damaged`, which moves it aside first.
    """
    import torch.distributed as dist  # noqa: PLC0415 - torch.distributed loads only when a run starts

    trainer = trainer_for(cfg)
    joined = dist.is_available() and not dist.is_initialized()
    dp = DataParallel.from_env(cfg.model.device)  # launched by torchrun: join its process group
    joined = joined and dp is not None
    try:
        if dp is not None:
            if not trainer.data_parallel or cfg.rollout.actors:
                why = f" ({trainer.why_serial})" if trainer.why_serial and not trainer.data_parallel else ""
                raise UserError("a data-parallel run (torchrun) trains LLM adapters in-process: it takes no "
                                f"{f'{trainer.name} trainer{why}' if not trainer.data_parallel else 'rollout.actors'}")
            out = Path(dp.broadcast(str(out)))  # rank 0's directory (a default name carries the time)
        lead = dp is None or dp.lead
        run = RunDir(out)
        if resume and not (run.path / "config.yaml").is_file():
            raise RunDirMissing(f"--resume {str(run.path)!r}: no config.yaml there (not a run directory)")
        if resume and not is_run(run.path):
            raise RunDirMissing(f"--resume {str(run.path)!r}: not a rolecall run (it has a config.yaml but no "
                                "run marker, metrics or checkpoints); nothing was changed")
        if lead and not resume:  # refused now, before any model loads; the folder is made once every input has loaded
            check_new_run_dir(run.path)
        if lead:
            notify = notify or (lambda text: print(text, file=sys.stderr))
        else:  # the other ranks compute; rank 0 speaks and writes
            notify, on_event = (lambda text: None), None
        # A resumed run is held from the start; a new one from when its folder is made (`RunDir.create`).
        with (hold(run.path) if lead and resume else contextlib.nullcontext()), StopRequest(notify) as stop:
            try:
                return trainer.run(cfg, run, Launch(resume, force, skip_damaged, on_event, stop_after, notify, stop, dp))
            finally:
                run.release()
    finally:
        if joined:
            dist.destroy_process_group()
