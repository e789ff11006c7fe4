"""Graceful stop on Ctrl-C (SIGINT) and on a scheduler's preemption (SIGTERM).

The first signal only asks: the loop finishes the step it is in, saves a checkpoint and
raises `TrainingStopped`, which names the saved step and the command that resumes it. A
second signal, at least `DUPLICATE_S` later, stops at once (KeyboardInterrupt); the last
saved checkpoint stays intact, since every save is atomic.

Work that saves nothing until it ends (a meta-policy's 20-minute corpus stage) has no step to
finish: inside `StopRequest.unsaved` the first signal stops at once, as `TrainingStopped`, since
waiting would only run the stage to its end past a scheduler's grace period.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

SIGNALS = (signal.SIGINT, signal.SIGTERM)
# A second signal sooner than this after the first is taken as the same one delivered twice:
# `timeout`, shells and schedulers (SLURM signals every process of a job step) forward
# signals, so one Ctrl-C or preemption can arrive twice within milliseconds.
DUPLICATE_S = 1.0


def resume_command(run_dir) -> str:
    """The command that continues the run in `run_dir`, launched the way this one was."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    launch = f"torchrun --nproc-per-node {world} -m rolecall" if world > 1 else "rolecall"
    return f"{launch} train --resume {run_dir}"


class TrainingStopped(Exception):
    """Training stopped on a signal after saving; `exit_code` is 128 + the signal number."""

    def __init__(self, message: str, signum: int, step: int, checkpoint: Path | None) -> None:
        super().__init__(message)
        self.signum, self.step, self.checkpoint = signum, step, checkpoint

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class _StopNow(KeyboardInterrupt):
    """Raised by the handler inside `StopRequest.unsaved`, turned into `TrainingStopped` where
    the block ends. A KeyboardInterrupt, because only that (and SystemExit) crosses the code in
    between: workflow code wraps an `Exception` as a WorkflowError, and an asyncio task keeps
    any other exception until every other episode has finished."""


class StopRequest:
    """Installs the handlers while in a `with` block (main thread only; elsewhere it is inert
    and signals keep their usual effect). `signum` is set by the first signal."""

    def __init__(self, notify: Callable[[str], None]) -> None:
        self.notify = notify
        self.signum: int | None = None
        self._at = 0.0
        self._previous: dict[int, object] = {}
        self._unsaved: Callable[[str], str] | None = None

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else ""

    def _handle(self, signum: int, frame) -> None:
        now = time.monotonic()
        if self.signum is None:
            self.signum, self._at = signum, now
            if self._unsaved is not None:
                raise _StopNow(signum)
            self.notify(f"{signal.Signals(signum).name}: finishing this step, then saving a checkpoint "
                        "(send it again to stop at once)")
            return
        if now - self._at < DUPLICATE_S:
            return  # the same event delivered twice (a wrapper forwarding it, a scheduler signalling every process)
        raise KeyboardInterrupt(f"second {signal.Signals(signum).name}: stopping at once")

    @contextmanager
    def unsaved(self, message: Callable[[str], str]):
        """A block that saves nothing until it ends: a stop request made before it, or a signal
        inside it, raises `TrainingStopped` at once with `message(signal name)` (which should say
        what is kept and how to resume)."""
        self._unsaved = message
        try:
            if self.requested:  # asked before the block: it does not start
                raise _StopNow(self.signum)
            yield
        except _StopNow:
            raise TrainingStopped(message(self.name), self.signum, 0, None) from None
        finally:
            self._unsaved = None

    def __enter__(self) -> "StopRequest":
        if threading.current_thread() is threading.main_thread():
            for s in SIGNALS:
                self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous.clear()
