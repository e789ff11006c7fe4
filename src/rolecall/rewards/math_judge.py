"""Symbolic answer equivalence under a hard deadline, from any thread or process.

`MathJudge` keeps one worker process (`rolecall.rewards.math_worker`) and talks to it over
pipes. A request that overruns its deadline gets the worker SIGKILLed and the answer
`None` ("could not judge"); the next request starts a fresh worker. Nothing here uses
signals, so it works from worker threads, and each process (e.g. after a fork) gets its own
worker.
"""
from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import threading
import time

_STARTUP_S = 60.0  # importing sympy + math-verify on a busy 2-core machine


class MathJudge:
    def __init__(self, deadline_s: float = 5.0) -> None:
        if deadline_s <= 0:
            raise ValueError(f"deadline_s must be > 0, got {deadline_s}")
        self.deadline_s = deadline_s
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._owner_pid = -1
        self._buf = b""
        self._next_id = 0
        self.restarts = 0  # worker kills (deadline overruns, crashes), for metrics

    def equivalent(self, pred: str, gold: str) -> bool | None:
        """True/False when judged in time; None when the worker crashed or overran."""
        with self._lock:
            try:
                self._ensure_worker()
                self._next_id += 1
                req = json.dumps({"id": self._next_id, "pred": pred, "gold": gold}) + "\n"
                self._proc.stdin.write(req.encode())
                self._proc.stdin.flush()
                line = self._read_line(time.monotonic() + self.deadline_s)
            except (OSError, ValueError):
                line = None
            if line is None:
                self._kill()
                return None
            resp = json.loads(line)
            if resp.get("id") != self._next_id or "error" in resp:
                self._kill()  # out of step or a grader exception: start clean next time
                return None
            return bool(resp["equal"])

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
            [sys.executable, "-m", "rolecall.rewards.math_worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            start_new_session=True)  # Ctrl-C in the terminal goes to the trainer, not here
        ready = self._read_line(time.monotonic() + _STARTUP_S)
        if ready is None or not json.loads(ready).get("ready"):
            self._kill()
            raise OSError("math judge worker did not start")

    def _read_line(self, deadline: float) -> bytes | None:
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:  # worker died
                return None
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
