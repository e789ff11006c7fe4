"""A child process spoken to in JSON lines, under a deadline per request.

Verifiers that run code which may hang or crash (math-verify on a pathological answer, a
user's reward function) run it in a `LineWorker`: the child prints `{"ready": true}` once its
imports are done, then answers each `{"id", ...}` line with one `{"id", ...}` line (or
`{"id", "error": str}`). A request that overruns its deadline, a child that dies, raises (unless
`keep_on_error`) or answers out of step is killed (with every process it started: the child
leads its own session), and the next request starts a fresh child. Nothing here uses signals, so it works
from any thread; a forked process starts its own child. `on_output`, if given, receives every
byte the child writes on stderr (a custom reward's log); otherwise only the last line is kept,
for a child that fails to start.
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from rolecall.rewards.processes import kill_tree

# Why a request got no answer. Only the first three can be caused by what was asked.
OVERRAN, CRASHED, RAISED, NO_WORKER, OUT_OF_STEP = "overran", "crashed", "raised", "no worker", "out of step"


def describe_failure(failure: tuple[str, str], subject: str, *, deadline_s: float, doing: str, who: str,
                     worker: str) -> str:
    """One line for a failed request: e.g. `judging <subject> overran the 5 s deadline`, `<who>
    crashed on <subject>`, `<worker> could not run (<why>)`."""
    kind, detail = failure
    if kind == OVERRAN:
        return f"{doing} {subject} overran the {deadline_s:g} s deadline"
    if kind == CRASHED:
        return f"{who} crashed on {subject}" + (f" ({detail})" if detail else "")
    if kind == RAISED:
        return f"{who} raised on {subject} ({detail})"
    if kind == NO_WORKER:
        return f"{worker} could not run ({detail})"
    return f"{worker} answered out of step"
Failure = tuple[str, str]  # (one of the kinds above, detail); ("", "") when answered


class LineWorker:
    def __init__(self, command: Sequence[str], *, name: str, startup_s: float = 60.0,
                 env: Mapping[str, str] | None = None, on_output: Callable[[bytes], None] | None = None,
                 keep_on_error: bool = False) -> None:
        self.command, self.name, self.startup_s = list(command), name, startup_s
        self.keep_on_error = keep_on_error  # a child that answered {"error"} is sound: keep it (custom rewards)
        self.env = None if env is None else dict(env)
        self.on_output = on_output  # every chunk the child writes on stderr; b"" when that stream ends
        self.startup_error = ""  # the child's last stderr line when it failed to start
        self.restarts = 0  # children killed (overruns, crashes), for metrics
        self.last_exit: int | None = None  # the return code of the last child that went (-N: signal N)
        self.pid: int | None = None  # the running child's process id
        self._drainer: threading.Thread | None = None
        self.ready_info: dict = {}  # what the child said when it started ({"ready": true, ...})
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._owner_pid = -1
        self._buf = b""
        self._next_id = 0

    def request(self, payload: Mapping, deadline_s: float) -> tuple[dict | None, Failure]:
        """(the child's answer without its id, ("", "")), or (None, (why not, detail))."""
        with self._lock:
            try:
                self._ensure()
                self._next_id += 1
                self._proc.stdin.write((json.dumps({**payload, "id": self._next_id}) + "\n").encode())
                self._proc.stdin.flush()
            except (OSError, ValueError) as e:  # no child, or it died before it saw the request
                self._kill()
                return None, (NO_WORKER, str(e) or type(e).__name__)
            try:
                line = self._read_line(time.monotonic() + deadline_s)
                failure = (OVERRAN, "") if line is None else None
            except EOFError:
                self._reap(1.0)  # it is exiting: its return code says how (a signal, os._exit(3))
                line, failure = None, (CRASHED, "")
            except (OSError, ValueError) as e:
                line, failure = None, (CRASHED, f"{type(e).__name__}: {e}")
            if failure:
                self._kill()
                return None, failure
            try:
                resp = json.loads(line)
            except ValueError:
                resp = {}
            if not isinstance(resp, dict) or resp.get("id") != self._next_id:
                self._kill()  # out of step: start clean next time
                return None, (OUT_OF_STEP, "")
            if "error" in resp:
                if not self.keep_on_error:
                    self._kill()  # an exception in the child: start clean next time
                return None, (RAISED, str(resp["error"]))
            resp.pop("id")
            return resp, ("", "")

    def close(self) -> None:
        with self._lock:
            self._kill()

    def start(self) -> None:
        """Start the child now (OSError if it cannot), not on the first request."""
        with self._lock:
            self._ensure()

    def _ensure(self) -> None:
        if self._proc is not None and self._proc.poll() is None and self._owner_pid == os.getpid():
            return
        if self._owner_pid == os.getpid():
            self._kill()
        # A forked child inherits the parent's handle; it must not share that worker.
        self._proc, self._owner_pid, self._buf = None, os.getpid(), b""
        self._proc = subprocess.Popen(
            self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=self.env, start_new_session=True)  # Ctrl-C in the terminal goes to the trainer, not here
        self.pid = self._proc.pid
        # stderr is always drained: a worker that writes much to it must not block.
        self._drainer = threading.Thread(target=self._drain_stderr, args=(self._proc,), daemon=True)
        self._drainer.start()
        try:
            ready = self._read_line(time.monotonic() + self.startup_s)
            self.ready_info = json.loads(ready) if ready is not None else {}
            started = self.ready_info.get("ready") is True
        except (EOFError, ValueError, AttributeError):
            started = False
        if not started:
            self._kill()
            raise OSError(f"{self.name} worker did not start" + (f": {self.startup_error}" if self.startup_error else ""))

    def _drain_stderr(self, proc: subprocess.Popen) -> None:
        fd, tail = proc.stderr.fileno(), b""
        try:
            while chunk := os.read(fd, 65536):
                if self.on_output is not None:
                    self.on_output(chunk)
                tail = (tail + chunk)[-4096:]
                lines = [x for x in tail.decode("utf-8", "replace").splitlines() if x.strip()]
                if lines:
                    self.startup_error = lines[-1].strip()
        except (OSError, ValueError):
            pass
        finally:
            if self.on_output is not None:
                self.on_output(b"")
            try:
                proc.stderr.close()
            except OSError:
                pass

    def _read_line(self, deadline: float) -> bytes | None:
        """The child's next line; None at the deadline; EOFError if it died."""
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
                raise EOFError(f"{self.name} worker died")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def _reap(self, wait_s: float) -> None:
        """Give a child that closed its stdout `wait_s` to exit by itself."""
        try:
            self._proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            pass

    def _kill(self) -> None:
        proc, drainer, self._proc, self._buf, self.pid = self._proc, self._drainer, None, b"", None
        if proc is None:
            return
        if self._owner_pid == os.getpid():
            alive = proc.poll() is None
            # The child leads its own session and process group: what it started (a checker, a
            # `sleep`) goes with it, even when the child itself already died. The group's id stays
            # taken while any member lives, so this never reaches another process. What left the
            # group (setsid) is still below a child that made itself their reaper (`processes`).
            if alive:
                kill_tree(proc.pid)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                if alive:
                    proc.kill()
            if alive:
                self.restarts += 1
                proc.wait()
            self.last_exit = proc.returncode
        for f in (proc.stdin, proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        if drainer is not None and self.on_output is not None:
            drainer.join(1.0)  # its last words reach the log before anyone reads the log's tail
