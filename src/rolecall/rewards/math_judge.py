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
import json
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

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


# Why one comparison gave no verdict. Only the first three can be caused by the answer.
_OVERRAN, _CRASHED, _RAISED, _NO_WORKER, _OUT_OF_STEP = "overran", "crashed", "raised", "no worker", "out of step"


class MathJudge:
    def __init__(self, deadline_s: float = 5.0, *, worker_command: Sequence[str] | None = None) -> None:
        """`worker_command` replaces the worker (`python -m rolecall.rewards.math_worker`) with
        another program speaking its protocol; tests use it to stand in a broken worker."""
        if deadline_s <= 0:
            raise ValueError(f"deadline_s must be > 0, got {deadline_s}")
        self.deadline_s = deadline_s
        self._command = list(worker_command or [sys.executable, "-m", "rolecall.rewards.math_worker"])
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._owner_pid = -1
        self._buf = b""
        self._next_id = 0
        self.restarts = 0  # worker kills (deadline overruns, crashes), for metrics

    def judge(self, pred: str, gold: str) -> Verdict:
        """Is `pred` equivalent to `gold`, and if that cannot be judged, whose fault is it?"""
        equal, failure = self._compare(pred, gold)
        if equal is not None:
            return Verdict(Outcome.EQUAL if equal else Outcome.UNEQUAL)
        if failure[0] not in (_OVERRAN, _CRASHED, _RAISED):
            return Verdict(Outcome.FAULT, self._describe(failure, "this answer"))
        what = self._describe(failure, "this answer")
        control, control_failure = self._compare(gold, gold)
        if control:
            return Verdict(Outcome.PATHOLOGICAL, f"{what} (the gold answer against itself judges in time)")
        if control is False:
            return Verdict(Outcome.FAULT, f"{what}, and the gold answer does not judge equal to itself")
        then = "the control could not run" if control_failure[0] == _NO_WORKER else "so did the control"
        return Verdict(Outcome.FAULT, f"{what}, and {then}: "
                                      f"{self._describe(control_failure, 'the gold answer against itself')}")

    def equivalent(self, pred: str, gold: str) -> bool | None:
        """True/False when judged in time; None when the worker could not run, crashed, overran
        or raised (without asking whose fault that was: `judge()` does)."""
        return self._compare(pred, gold)[0]

    def _compare(self, pred: str, gold: str) -> tuple[bool | None, tuple[str, str]]:
        """One request: (verdict, ("", "")), or (None, (why not, detail))."""
        with self._lock:
            try:
                self._ensure_worker()
                self._next_id += 1
                req = json.dumps({"id": self._next_id, "pred": pred, "gold": gold}) + "\n"
                self._proc.stdin.write(req.encode())
                self._proc.stdin.flush()
            except (OSError, ValueError) as e:  # no worker, or it died before it saw the request
                self._kill()
                return None, (_NO_WORKER, str(e) or type(e).__name__)
            try:
                line = self._read_line(time.monotonic() + self.deadline_s)
                failure = (_OVERRAN, "") if line is None else None
            except EOFError:
                line, failure = None, (_CRASHED, "")
            except (OSError, ValueError) as e:
                line, failure = None, (_CRASHED, f"{type(e).__name__}: {e}")
            if failure:
                self._kill()
                return None, failure
            try:
                resp = json.loads(line)
            except ValueError:
                resp = {}
            if resp.get("id") != self._next_id:
                self._kill()  # out of step: start clean next time
                return None, (_OUT_OF_STEP, "")
            if "error" in resp:
                self._kill()  # a grader exception: start clean next time
                return None, (_RAISED, str(resp["error"]))
            return bool(resp["equal"]), ("", "")

    def _describe(self, failure: tuple[str, str], subject: str) -> str:
        kind, detail = failure
        if kind == _OVERRAN:
            return f"judging {subject} overran the {self.deadline_s:g} s deadline"
        if kind == _CRASHED:
            return f"the judge crashed on {subject}" + (f" ({detail})" if detail else "")
        if kind == _RAISED:
            return f"the judge raised on {subject} ({detail})"
        if kind == _NO_WORKER:
            return f"the math judge's worker could not run ({detail})"
        return "the math judge's worker answered out of step"

    def close(self) -> None:
        with self._lock:
            self._kill()

    # -- worker management -------------------------------------------------------------
    def _ensure_worker(self) -> None:
        if self._proc is not None and self._proc.poll() is None and self._owner_pid == os.getpid():
            return
        if self._owner_pid == os.getpid():
            self._kill()
        # A forked child inherits the parent's handle; it must not share that worker.
        self._proc, self._owner_pid, self._buf = None, os.getpid(), b""
        self._proc = subprocess.Popen(
            self._command,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            start_new_session=True)  # Ctrl-C in the terminal goes to the trainer, not here
        try:
            ready = self._read_line(time.monotonic() + _STARTUP_S)
            started = ready is not None and json.loads(ready).get("ready") is True
        except (EOFError, ValueError, AttributeError):
            started = False
        if not started:
            self._kill()
            raise OSError("math judge worker did not start")

    def _read_line(self, deadline: float) -> bytes | None:
        """The worker's next line; None at the deadline; EOFError if the worker died."""
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                raise EOFError("math judge worker died")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def _kill(self) -> None:
        proc, self._proc, self._buf = self._proc, None, b""
        if proc is None:
            return
        if self._owner_pid == os.getpid() and proc.poll() is None:
            self.restarts += 1
            proc.kill()
            proc.wait()
        for f in (proc.stdin, proc.stdout):
            try:
                f.close()
            except OSError:
                pass


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
