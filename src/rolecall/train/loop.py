"""The RL trainer's loop, as named stages: start (new or resumed) -> steps -> validate -> checkpoint -> stop.

Each step is `rolecall.train.step.train_step` (rollout -> score -> credit -> advantages ->
update -> metrics). Data parallelism (`Ranks`), the wall-clock limit (`Deadline`) and where
rows go (`RunLog`) sit behind small objects in `rolecall.train.session`; the run directory's
start and resume in `rolecall.train.resume`; the best validation and the early stop below it
in `rolecall.train.peak`.
"""
from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

from rolecall.algo.memory import micro_batch_tokens
from rolecall.errors import UserError
from rolecall.policies.model import resolve_device, resolve_model_dir
from rolecall.policies.precision import auto_dtype
from rolecall.rundir.checkpoint import load_checkpoint, mark_best, save_checkpoint
from rolecall.rundir.cpu_share import CpuShare, cpu_share_or_none
from rolecall.rundir.directory import RunDir
from rolecall.rundir.fingerprint import run_fingerprint
from rolecall.rundir.guards import NonFiniteStreak
from rolecall.rundir.sitting import record as record_sitting
from rolecall.rundir.stop import TrainingStopped, resume_command
from rolecall.schema import Config
from rolecall.train.peak import METRIC, PEAK, STOP, Peak, recall_peak
from rolecall.train.resume import open_run_dir, restore
from rolecall.train.session import Deadline, Launch, Ranks, RunLog
from rolecall.train.memory import MemoryWatch, give_back
from rolecall.train.stack import Stack, build_stack
from rolecall.train.step import notices, train_step, validate_episodes


class VerifierFailure(UserError, RuntimeError):
    """The verifier failed on most of the batch for several steps in a row."""


def run_rl(cfg: Config, run: RunDir, launch: Launch) -> Path:
    """The RL loop. On a data-parallel run every rank runs it in step; only rank 0 writes the run
    directory and the sinks, and rank 0 decides where a resume starts."""
    t_start = time.time()
    ranks = Ranks(launch.dp)
    point, logged = (ranks.on_lead(lambda: open_run_dir(cfg, run, launch)) if launch.resume  # refuse before loading
                     else (None, 0))
    stack = build_stack(cfg)
    share = cpu_share_or_none(cfg.train.threads)  # train.threads 0: a fair share of the machine's cores
    log = RunLog(run, ranks, launch.on_event, t_start)
    deadline = Deadline(cfg.train.max_minutes, ranks, t_start)
    peak = Peak(cfg.train)
    try:
        if not launch.resume:  # every input has loaded: only now is the new run's folder made
            point, logged = ranks.on_lead(lambda: open_run_dir(cfg, run, launch))
        if ranks.lead and (log_to := getattr(stack.verifier, "log_to", None)):  # a custom reward's output: <run>/reward.log
            log_to(run.path)
        fingerprint = run_fingerprint(cfg, stack)
        ckpt, start, validated = ranks.on_lead(lambda: restore(cfg, run, stack, point, logged, fingerprint, launch))
        if ranks.lead:  # which code writes the steps from here, on what and in which dtype (a resume may differ)
            precision = precision_of(cfg, stack)
            record_sitting(run.path, start, precision=precision)
            if cfg.model.dtype == "auto":  # and what `auto` chose and why, on the console
                for path, chosen in precision.items():
                    launch.notify(f"model.dtype auto: {chosen['dtype']}"
                                  f"{f' ({path})' if len(precision) > 1 else ''}: {chosen['why']}")
        if cfg.algo.micro_batch_tokens == "auto":  # and what the micro-batch budget came to
            say_micro_batches(log, launch, stack, start)
        if not ranks.lead and ckpt is not None:  # rank 0 checked and loaded it; the others load the same
            load_checkpoint(ckpt, stack.models_by_adapter(), stack.optims, stack.routing.adapters)
        log.open(cfg, stack.routing, start, launch.resume)
        peak.recall(ranks.on_lead(lambda: recall_peak(run, start, cfg.train.stop_below_peak, launch.notify)))
        said = None
        if val_due(cfg, start) and not validated:  # also the one a stop on a signal skipped
            said = validation(stack, log, share, start, peak, launch.notify)
            if said == PEAK and ranks.lead:
                mark_best(run.path, start, *peak.best(start))  # step_<start> is there: the run resumed from it
        if said == STOP and start < cfg.train.steps:  # still below its peak: nothing to train, step_<start> is saved
            stop_below_peak(log, launch, peak, start)
            return run.path
        saved_at, requested = run_steps(stack, log, share, ranks, launch, start, deadline, peak)
        if requested and saved_at < cfg.train.steps:
            raise stopped(launch, run, saved_at)
    finally:  # a halted or failed run still flushes its sinks and stops the verifier's processes
        stack.close()
        if share is not None:
            share.close()
        log.close(launch.notify)
    return run.path


def run_steps(stack: Stack, log: RunLog, share: CpuShare | None, ranks: Ranks, launch: Launch, start: int,
              deadline: Deadline, peak: Peak) -> tuple[int, bool]:
    """Steps start+1.. until the last, a stop request, the deadline, the early stop below the peak or
    `stop_after`; (last saved step, stopped by a request)."""
    cfg = stack.cfg
    halts = Halts(cfg)
    watch = MemoryWatch("To hold less: a smaller algo.micro_batch_tokens (tokens per forward and backward), "
                        "rollout.max_batch (rows decoded at once) or fewer samples per step.",
                        micro_batch_tokens(cfg.algo.micro_batch_tokens, stack.model))
    saved_at, requested = start, False
    for step in range(start + 1, cfg.train.steps + 1):
        requested = ranks.any(launch.stop.requested)
        if requested:
            break
        threads = share.apply() if share is not None else None  # another run may have started or ended
        row, episodes = train_step(stack, step)
        if threads is not None:
            row["time/threads"] = threads
        low = watch.observe(row)
        log.emit("step", row)
        if low is not None and ranks.lead:
            launch.notify(low)
        log.samples(step, episodes, cfg.train.samples_per_step)
        for text in notices(stack, f"step {step}", episodes, skipped=bool(row.get("skipped/unscorable")),
                            samples_file="samples.jsonl"):
            launch.notify(text)
        halt = halts.observe(step, row)
        if halt is not None:  # skipped and non-finite updates changed no weight: the saved state is sound
            save(stack, log, step, peak)
            raise halt
        requested = ranks.any(launch.stop.requested)
        late = deadline.passed() and step < cfg.train.steps
        said = None
        if (val_due(cfg, step) or late) and not requested:  # a stop skips it; the resume runs it
            said = validation(stack, log, share, step, peak, launch.notify)
            requested = ranks.any(launch.stop.requested)  # a signal during the validation still saves this step
        # A new peak is saved whatever checkpoint_every says: the best is never lost.
        if step % cfg.train.checkpoint_every == 0 or step == cfg.train.steps or requested or late or said:
            save(stack, log, step, peak)
            saved_at = step
        if said == STOP and not requested and step < cfg.train.steps:  # an ending, not a failure: exit 0
            stop_below_peak(log, launch, peak, step)
            break
        if late and not requested:  # a finished slice of the run, not a failure: exit 0
            message = (f"train.max_minutes={cfg.train.max_minutes:g} reached after step {step} of "
                       f"{cfg.train.steps}: validated, checkpoint step_{step} is saved. Continue with: "
                       f"{resume_command(log.run.path)}")
            log.note(step, "stop", reason="max_minutes", message=message)
            if ranks.lead:
                launch.notify(message)
            break
        if launch.stop_after is not None and step >= launch.stop_after:
            break
    return saved_at, requested


def precision_of(cfg: Config, stack: Stack) -> dict[str, dict]:
    """Per base model path: the dtype its weights took and why. A run's sittings keep it, not
    metrics.jsonl, so the metric rows stay steps and validations only."""
    if cfg.model.dtype != "auto":
        return {path: {"dtype": cfg.model.dtype, "why": "set by model.dtype"} for path in stack.bases}
    out = {}
    for path in stack.bases:  # each base chose for itself; cached: the same answer it was loaded with
        chosen = auto_dtype(resolve_device(cfg.model.device), resolve_model_dir(path))
        out[path] = {"dtype": str(chosen.dtype).removeprefix("torch."), "why": chosen.why}
    return out


def say_micro_batches(log: RunLog, launch: Launch, stack: Stack, step: int) -> None:
    tokens = {path: micro_batch_tokens("auto", base.model) for path, base in stack.bases.items()}
    if log.ranks.lead:  # and every step row carries the run's own (`mem/micro_batch_tokens`)
        said = ", ".join(f"{n:,}" for n in tokens.values())
        launch.notify(f"algo.micro_batch_tokens auto: {said} tokens per forward and backward "
                      f"({'at most about 1 GiB of activations on this CPU' if stack.model.device.type == 'cpu' else 'accelerator'})")


def val_due(cfg: Config, step: int) -> bool:
    return step == 0 or step % cfg.train.val_every == 0 or step == cfg.train.steps


def validation(stack: Stack, log: RunLog, share: CpuShare | None, step: int, peak: Peak,
               notify: Callable[[str], None] | None = None) -> str | None:
    """Validate and log, `notify` what the verifier had to say; what the peak makes of it (`PEAK`, `STOP` or None)."""
    if share is not None:
        share.apply()
    log.phase(step, f"validating ({len(stack.val_P)} problems)")
    metrics, episodes = validate_episodes(stack)
    give_back()
    for text in notices(stack, f"validation at step {step}", episodes, validation=True, samples_file="val_samples.jsonl"):
        if notify is not None:  # before the accuracy line they explain
            notify(text)
    log.emit("val", {"step": step, **metrics})
    log.samples(step, episodes, stack.cfg.train.val_samples, validation=True)
    return peak.observe(step, metrics[METRIC])


def save(stack: Stack, log: RunLog, step: int, peak: Peak) -> Path | None:
    if not log.ranks.lead:
        return None
    return save_checkpoint(log.run.path, step, stack.models_by_adapter(), stack.optims, stack.routing.adapters,
                           stack.cfg.train.keep_last, best=peak.best(step))


def stop_below_peak(log: RunLog, launch: Launch, peak: Peak, step: int) -> None:
    """End the run at `step` (already checkpointed): say why in metrics.jsonl (summary.json) and to the user."""
    message = peak.stop_message(step, resume_command(log.run.path))
    log.note(step, "stop", reason="stop_below_peak", message=message)
    if log.ranks.lead:
        launch.notify(message)


class Halts:
    """What ends a run with an error after a checkpoint: a streak of non-finite steps, or of steps
    skipped because the verifier could not score the batch."""

    def __init__(self, cfg: Config) -> None:
        self.cfg, self.skipped, self.nonfinite = cfg, 0, NonFiniteStreak(cfg.train.max_nonfinite_steps)

    def observe(self, step: int, row: dict) -> RuntimeError | None:
        r = self.cfg.reward
        self.skipped = self.skipped + 1 if row.get("skipped/unscorable") else 0
        halt: RuntimeError | None = self.nonfinite.observe(step, row)  # the more specific cause first
        if halt is None and self.skipped >= r.max_skipped_steps:
            statuses = {k.removeprefix("reward/status_"): round(v, 3) for k, v in row.items()
                        if k.startswith("reward/status_")}
            halt = VerifierFailure(
                f"halted at step {step}: {self.skipped} steps in a row skipped because more than "
                f"{r.max_unscorable_frac:.0%} of episodes were unscorable (the {r.name} verifier "
                f"is failing; last step's statuses {statuses}). A checkpoint of step {step} was saved; "
                f"see samples.jsonl, fix the verifier or data, then --resume.")
        return halt


def stopped(launch: Launch, run: RunDir, saved_at: int) -> TrainingStopped:
    """The error a stop request ends the run with (a rank that was not signalled itself stops with
    the others, as on SIGTERM)."""
    signum = launch.stop.signum or signal.SIGTERM
    ckpt = f"checkpoint step_{saved_at} is saved" if saved_at else "no step was trained, nothing to save"
    return TrainingStopped(f"stopped by {signal.Signals(signum).name} after step {saved_at}: {ckpt}. "
                           f"Continue with: {resume_command(run.path)}", signum, saved_at,
                           run.path / "checkpoints" / f"step_{saved_at}" if saved_at else None)
