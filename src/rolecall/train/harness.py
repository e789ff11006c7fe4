"""What a trainer registered from another package trains with (`rolecall.train.trainers.register`).

`run_hosted` builds the run's parts (`build_stack`: the LLM agents as the config routes them,
the task's problems, the verifier, and the Ray rollout actors when `rollout.actors` is set),
hands the trainer's `train(cfg, harness)` a `Harness`, and closes them all whatever happens,
with `summary.json` written from what was logged. Such a trainer trains something of its own
(its weights, its files under the run directory) while the LLM agents stay as they are: the
stack's adapter optimizers are never stepped.
"""
from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rolecall.algo.scoring import score
from rolecall.fsio import write_durable
from rolecall.rundir.checkpoint import FINGERPRINT
from rolecall.rundir.directory import RunDir, read_lines
from rolecall.rundir.fingerprint import ResumeRefused, check_resume, run_fingerprint
from rolecall.rundir.sitting import record as record_sitting
from rolecall.rundir.stop import TrainingStopped, resume_command
from rolecall.schema import Config
from rolecall.train.session import Launch, summarize
from rolecall.train.stack import Stack, build_stack
from rolecall.train.step import roll_out
from rolecall.types import Episode, Problem


class Harness:
    """The run as a registered trainer sees it.

    `path` (the run directory), `workflow` (this process's instance), `train_P` and `val_P`,
    `resume` and `force` (the switches), `stop` (the stop request: `requested`, `name`) and
    `notify(text)` (what the user should read)."""

    def __init__(self, cfg: Config, run: RunDir, launch: Launch, stack: Stack, start: float) -> None:
        self.cfg, self._run, self._launch, self._stack, self._start = cfg, run, launch, stack, start
        self.path = run.path
        self.workflow = stack.workflow
        self.train_P, self.val_P = stack.train_P, stack.val_P
        self.resume, self.force = launch.resume, launch.force
        self.stop, self.notify = launch.stop, launch.notify
        self._sat = False  # whether this sitting is recorded (`resumes_at`)

    @property
    def actors(self) -> int:
        """How many Ray rollout actors play the episodes (0: this process)."""
        return self._stack.actors.n if self._stack.actors is not None else 0

    def begin(self, settings: dict[str, dict], refused: type[Exception] = ResumeRefused) -> str:
        """Make the run directory (a new run's, now that every input has loaded) and record the
        resume fingerprint: the run's inputs plus the trainer's own `settings` ({section: values}).
        A resume onto other inputs is refused as `check_resume` says; onto other settings with
        `refused`, naming the values that differ; `force` lets both through with a notice.
        Returns a short digest of the fingerprint, for the trainer's own files. The trainer then
        says where it starts or resumes (`resumes_at`) before it logs a row."""
        run, stack = self._run, self._stack
        if not self.resume:
            run.create(self.cfg)
        if log_to := getattr(stack.verifier, "log_to", None):  # a custom reward's output: <run>/reward.log
            log_to(run.path)
        fingerprint = {**run_fingerprint(self.cfg, stack), **settings}
        fp_file = run.path / FINGERPRINT
        if self.resume and fp_file.exists():
            saved = json.loads(fp_file.read_text())
            diffs = check_resume(saved, fingerprint, force=self.force)
            for section, now in settings.items():
                then = saved.get(section) or {}
                if saved.get(section) != now:
                    changed = sorted(k for k in now if then.get(k) != now[k])
                    if not self.force:
                        raise refused(f"--resume: {section} settings {changed} differ from the run's; "
                                      "pass --force to continue anyway")
                    diffs.append(f"{section} settings {changed} differ")
            for diff in diffs:
                self.notify(f"--force: resuming although {diff}")
        run.write_fingerprint(fingerprint)
        return hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()[:16]

    def resumes_at(self, step: int, stage: str | None = None) -> None:
        """Where this sitting begins (`stage` for a trainer whose steps restart per stage), once
        the trainer has dropped what a killed run logged past its last saved state: recorded in
        `<run>/sittings.jsonl` with the code that writes from here."""
        record_sitting(self.path, step, stage)
        self._sat = True

    def emit(self, kind: str, row: dict) -> None:
        """A row to metrics.jsonl (with `time/elapsed_s`) and to the caller's `on_event`; a
        "progress" row (how far a long stage is) to `on_event` only."""
        if kind != "progress":
            if not self._sat:  # a row no sitting covers: which code wrote it would be lost
                raise RuntimeError("a trainer on the harness says where it starts (Harness.resumes_at) before it logs")
            row["time/elapsed_s"] = round(time.time() - self._start, 2)
            self._run.log(row)
        if self._launch.on_event:
            self._launch.on_event(kind, row)

    def set_workflow(self, **settings: Any) -> None:
        """Attributes of the workflow that plays the episodes, in this process and on every Ray
        rollout actor (they stay until set again; an actor gets them with every share it plays,
        so a replaced actor has them too). They travel by pickle: plain objects, no open files."""
        for name, value in settings.items():
            setattr(self._stack.workflow, name, value)
        if self._stack.actors is not None:
            self._stack.actors.configure(settings)

    def play(self, problems: list[Problem], seed: int) -> list[Episode]:
        """One episode per problem under the run's routing, in this process or split over the Ray
        rollout actors, scored by the run's verifier."""
        stack = self._stack
        eps = roll_out(stack, problems, 1, stack.routing.routes, seed=seed)
        score(eps, stack.verifier)
        for text in getattr(stack.verifier, "drain_notices", list)():  # a custom reward's first failures
            self.notify(text)
        return eps

    def stopped(self, message: str, step: int, checkpoint: Path | None) -> TrainingStopped:
        """The error to raise after saving on a stop request (its exit code is the signal's)."""
        return TrainingStopped(message, self.stop.signum, step, checkpoint)

    def unsaved(self, stage: str):
        """A block for a stage that saves only when it ends: a stop request stops it at once (its
        work so far is dropped; a resume runs it again) instead of letting it run to its end."""
        return self.stop.unsaved(lambda name: (
            f"stopped by {name} in the {stage} stage, which saves only when it ends: its work so far is dropped and "
            f"a resume runs it again; every finished stage is kept. Continue with: {resume_command(self.path)}"))

    def keep_rows(self, keep: Callable[[dict], bool]) -> None:
        """Rewrite metrics.jsonl with the rows `keep` accepts (a resume forgets what a killed
        process logged past the state it continues from)."""
        metrics = self._run.metrics
        if metrics.exists():
            kept = "".join(line + "\n" for line, row in read_lines(metrics) if keep(row))
            write_durable(metrics, kept.encode())


def run_hosted(train: Callable[[Config, Harness], Any], cfg: Config, run: RunDir, launch: Launch) -> Path:
    """`train(cfg, harness)` on the run's parts, closed afterwards; summary.json from what was logged."""
    start = time.time()
    try:
        stack = build_stack(cfg)
        try:
            train(cfg, Harness(cfg, run, launch, stack, start))
        finally:
            stack.close()
    finally:
        summarize(run, launch.notify)
    return run.path
