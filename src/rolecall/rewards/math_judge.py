"""Symbolic answer equivalence under a hard deadline, from any thread or process.

`MathJudge` keeps one worker process (`rolecall.rewards.math_worker`) and talks to it over
pipes. A request that overruns its deadline gets the worker SIGKILLed; the next request
starts a fresh worker. Nothing here uses signals, so it works from worker threads, and each
process (e.g. after a fork) gets its own worker.

`judge()` also says whose fault a failed comparison is. When comparing an answer with the
gold overruns the deadline, crashes the worker or raises in it, a control comparison (the
gold against itself, on a fresh worker, under the same deadline) follows: if the control
judges the gold equal to itself in time, the worker and the gold are healthy and the
failure was caused by the answer (`PATHOLOGICAL`); otherwise the judge or the gold is at
fault (`FAULT`). A worker that cannot start is a `FAULT` without a control.
"""
from __future__ import annotations

import atexit
import enum
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from rolecall.rewards.worker import CRASHED, NO_WORKER, OVERRAN, RAISED, LineWorker, describe_failure

_STARTUP_S = 60.0  # importing sympy + math-verify on a busy 2-core machine


class Outcome(enum.Enum):
    EQUAL = "equal"
    UNEQUAL = "unequal"
    PATHOLOGICAL = "pathological"  # judging this answer failed; the judge handles the gold fine
    FAULT = "fault"  # the judge (or the gold answer) failed on its own


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    reason: str = ""  # what went wrong, for PATHOLOGICAL and FAULT


class MathJudge:
    def __init__(self, deadline_s: float = 5.0, *, worker_command: Sequence[str] | None = None) -> None:
        """`worker_command` replaces the worker (`python -m rolecall.rewards.math_worker`) with
        another program speaking its protocol; tests use it to stand in a broken worker."""
        if deadline_s <= 0:
            raise ValueError(f"deadline_s must be > 0, got {deadline_s}")
        self.deadline_s = deadline_s
        self._worker = LineWorker(worker_command or [sys.executable, "-m", "rolecall.rewards.math_worker"],
                                  name="math judge", startup_s=_STARTUP_S)

    def judge(self, pred: str, gold: str) -> Verdict:
        """Is `pred` equivalent to `gold`, and if that cannot be judged, whose fault is it?"""
        equal, failure = self._compare(pred, gold)
        if equal is not None:
            return Verdict(Outcome.EQUAL if equal else Outcome.UNEQUAL)
        if failure[0] not in (OVERRAN, CRASHED, RAISED):
            return Verdict(Outcome.FAULT, self._describe(failure, "this answer"))
        what = self._describe(failure, "this answer")
        control, control_failure = self._compare(gold, gold)
        if control:
            return Verdict(Outcome.PATHOLOGICAL, f"{what} (the gold answer against itself judges in time)")
        if control is False:
            return Verdict(Outcome.FAULT, f"{what}, and the gold answer does not judge equal to itself")
        then = "the control could not run" if control_failure[0] == NO_WORKER else "so did the control"
        return Verdict(Outcome.FAULT, f"{what}, and {then}: "
                                      f"{self._describe(control_failure, 'the gold answer against itself')}")

    def equivalent(self, pred: str, gold: str) -> bool | None:
        """True/False when judged in time; None when the worker could not run, crashed, overran
        or raised (without asking whose fault that was: `judge()` does)."""
        return self._compare(pred, gold)[0]

    def _compare(self, pred: str, gold: str) -> tuple[bool | None, tuple[str, str]]:
        """One request: (verdict, ("", "")), or (None, (why not, detail))."""
        resp, failure = self._worker.request({"pred": pred, "gold": gold}, self.deadline_s)
        return (None, failure) if resp is None else (bool(resp["equal"]), failure)

    def _describe(self, failure: tuple[str, str], subject: str) -> str:
        return describe_failure(failure, subject, deadline_s=self.deadline_s, doing="judging", who="the judge",
                                worker="the math judge's worker")

    @property
    def restarts(self) -> int:  # worker kills (deadline overruns, crashes), for metrics
        return self._worker.restarts

    def close(self) -> None:
        self._worker.close()


_default: MathJudge | None = None
_default_lock = threading.Lock()


def default_judge() -> MathJudge:
    """The process-wide judge (one worker per process, started on first use)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = MathJudge()
            atexit.register(_default.close)
        return _default
