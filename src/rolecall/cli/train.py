"""`rolecall train`: check the config, then train with a progress bar; Ctrl-C stops at a checkpoint."""
from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Optional

import typer

from rolecall.cli.common import as_user_errors, console, fail, load_config_or_fail, split_config_args


def _config(config: Optional[Path], overrides: list[str], steps: Optional[int]):
    if steps is not None:
        overrides = [*overrides, f"train.steps={steps}"]
    return load_config_or_fail(config, overrides)


def train(
    config: Optional[str] = typer.Argument(None, help="YAML config; omitted = the embedded default (voting, Isolated-Policy)."),
    overrides: list[str] = typer.Argument(None, help="dotted.key=value overrides, e.g. routing=shared"),
    out: Optional[Path] = typer.Option(None, "--out", help="Run directory (default runs/<workflow>-<time>)."),
    steps: Optional[int] = typer.Option(None, "--steps", help="Training steps (train.steps)."),
    resume: Optional[Path] = typer.Option(None, "--resume", help="Continue the run in this directory."),
    force: bool = typer.Option(False, "--force", help="With --resume: continue even though the model, tokenizer, "
                               "data, workflow, routing, LoRA or reward differ from the checkpoint's."),
    skip_damaged: bool = typer.Option(False, "--skip-damaged", help="With --resume: move damaged checkpoints "
                                      "to checkpoints/damaged/ (with a copy of the logs) and resume from the newest good one."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Check the config and every input training loads "
                                 "(tokenizer, chat template, every weights file's header, dataset rows, verifier) and "
                                 "exit; nothing is written. A problem is the first thing it prints."),
    show_config: bool = typer.Option(False, "--show-config", help="With --dry-run: then print the resolved, "
                                     "validated config."),
    verbose: bool = typer.Option(False, "--verbose", help="Show the libraries' own output (weight-loading bars, "
                                 "warnings) here instead of in the run's library.log."),
) -> None:
    """Train the workflow's policies with RL; writes a run directory.

    --out must be a new or empty directory (or a rolecall run that logged nothing): a folder holding anything else is refused before anything is written.

    Time limit: train.max_minutes=N validates, saves and stops after the step that passes N minutes; --resume continues it.

    Ctrl-C or SIGTERM finishes the current step, saves a checkpoint and names the command that resumes it; a second one stops at once."""
    from rolecall.config import dump_config

    if force and resume is None:
        fail("--force only applies with --resume DIR")
    if skip_damaged and resume is None:
        fail("--skip-damaged only applies with --resume DIR")
    if resume is not None:
        if config is not None and "=" not in config:
            fail("--resume takes the config from the run directory; do not pass CONFIG too")
        cfg_path = resume / "config.yaml"
        if not cfg_path.is_file():
            fail(f"--resume {str(resume)!r}: no config.yaml there (not a run directory)")
        cfg = _config(cfg_path, split_config_args(config, overrides or [])[1], steps)
        out = resume
    else:
        path, ov = split_config_args(config, overrides or [])
        cfg = _config(path, ov, steps)
    if show_config and not dry_run:
        fail("--show-config prints the config of a dry run; pass --dry-run too")
    if dry_run:
        _preflight(cfg)  # an error first, not after a page of config
        if show_config:
            sys.stdout.write(dump_config(cfg))
        return
    if out is None and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        fail("a data-parallel run (torchrun) needs --out DIR (or --resume DIR): every rank must name "
              "the same run directory")
    out = out or Path("runs") / f"{cfg.workflow.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    if resume is None:  # refused before anything loads or is written (and again when the folder is made)
        from rolecall.rundir.ownership import check_new_run_dir

        with as_user_errors():
            check_new_run_dir(out)
    _run_training(cfg, out, resume is not None, force, skip_damaged, verbose)


def _preflight(cfg) -> None:
    """Dry run: every input checked as training loads it (tokenizer and chat template, every weights
    file's header, dataset rows, verifier), no weights loaded and nothing written."""
    from rolecall.train.stack import preflight

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with as_user_errors():
        info = preflight(cfg)
    for line in info.pop("data_report"):
        console.print(line, highlight=False, soft_wrap=True)
    from rolecall.advantages import ESTIMATORS, estimator_options

    for name in sorted(ESTIMATORS):  # what algo.estimator (and algo.estimator_options) can be
        chosen = [cfg.algo.estimator] if isinstance(cfg.algo.estimator, str) else list(cfg.algo.estimator.values())
        mark = "*" if name in chosen else " "
        opts = ", ".join(f"{k}={v:g}" for k, v in estimator_options(name).items())
        opts = f"options, defaults: {opts}" if opts else "no options"
        console.print(f"{mark} estimator {name:<10} groups by {ESTIMATORS[name].default_group_by:<5} ({opts})",
                      highlight=False, soft_wrap=True)
    console.print(f"preflight ok: {json.dumps(info)}", highlight=False, soft_wrap=True)


def _run_training(cfg, out: Path, resume: bool, force: bool = False, skip_damaged: bool = False,
                  verbose: bool = False) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from rolecall.library_logs import library_output_to
    from rolecall.rundir.ownership import is_run
    from rolecall.api import train_run
    from rolecall.rundir.stop import TrainingStopped

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    rank = int(os.environ.get("RANK", "0"))  # under torchrun only rank 0 speaks; the others log to files
    progress = Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.fields[info]}"),
                        console=console, transient=False, disable=rank > 0)
    task = progress.add_task("train", total=cfg.train.steps, info="loading")

    def on_event(kind: str, row: dict) -> None:
        if kind == "alarm":  # each alarm fires once per run; say it where the user is looking
            from rich.markup import escape

            progress.console.print(f"[bold yellow]alarm[/] step {row['step']} {row['alarm']}: {escape(row['message'])}",
                                   highlight=False, soft_wrap=True)
        elif kind == "val":
            acc = row.get("val/accuracy")
            if acc is None or acc != acc:  # NaN: accuracy is over scorable samples, and there were none
                shown = f"n/a (no scorable sample; unscorable {row.get('val/unscorable_frac', 1.0):.0%})"
            else:
                shown = f"{acc:.3f}" + (f"  (unscorable {u:.0%})" if (u := row.get("val/unscorable_frac")) else "")
            progress.console.print(f"step {row['step']:>4}  val/accuracy {shown}", highlight=False)
            progress.update(task, info=f"last validation {shown}")
        elif kind == "phase":  # what a long wait is (a validation), instead of the last step's figures
            progress.update(task, info=row["stage"])
        elif kind == "progress":  # a meta-policy run's SoftRankPO steps
            progress.update(task, total=row["total"], completed=row["done"], info=row["stage"])
        elif kind == "meta":  # a meta-policy run's stages: say each where the user is looking
            acc = next((v for k, v in row.items() if k.endswith("/accuracy")), None)
            if acc is not None and row["stage"] in ("eval", "softrank_eval"):
                what = row.get("arm") or f"SoftRankPO step {row['step']}"
                progress.console.print(f"{row['stage']:<14} {what:<22} val/accuracy {acc:.3f}")
            elif row["stage"] in ("states", "corpus"):
                n = next(v for k, v in row.items() if k.endswith("/rows"))
                progress.console.print(f"{row['stage']:<14} {n} rows in {row['time/elapsed_s']:.0f}s of the run")
        else:
            progress.update(task, completed=row["step"],
                            info=f"reward {row.get('reward/mean', float('nan')):.3f}  {row['time/step_s']:.1f}s/step")

    def notify(text: str) -> None:
        progress.console.print(text, highlight=False, soft_wrap=True, markup=False)

    try:
        chatter = (contextlib.nullcontext() if verbose else  # written once the folder is the run's, never before
                   library_output_to(out, "library.log" if rank == 0 else f"library-rank{rank}.log", ready=is_run))
        with as_user_errors(catch_interrupt=False), progress, chatter:
            path = train_run(cfg, out, resume=resume, force=force, skip_damaged=skip_damaged, on_event=on_event,
                             notify=notify).path
    except TrainingStopped as e:
        if rank == 0:
            console.print(str(e), highlight=False, soft_wrap=True, markup=False)
        raise typer.Exit(e.exit_code) from None
    except KeyboardInterrupt:  # a second signal: at once, mid-step; saves are atomic, so the last one holds
        from rolecall.rundir.checkpoint import latest_checkpoint

        ckpt = latest_checkpoint(out)
        kept = f"the last saved checkpoint, {ckpt.name}, is intact" if ckpt else "no checkpoint was saved yet"
        from rolecall.rundir.stop import resume_command

        console.print(f"stopped at once; {kept}. Continue with: {resume_command(out)}",
                      highlight=False, soft_wrap=True, markup=False)
        raise typer.Exit(130) from None
    if rank == 0:
        console.print(f"run directory: {path}")
