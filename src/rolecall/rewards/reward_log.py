"""A custom reward's log: what its worker processes print, line by line, and rolecall's own
lines on what happened to them. It starts in a temporary file (the verifier starts before the
run directory exists) and moves to `<run>/reward.log` once there is one."""
from __future__ import annotations

import os
import tempfile
import threading
from collections import deque
from pathlib import Path

LOG_NAME = "reward.log"
LOG_CAP_BYTES = 64 << 20  # a reward that prints without end fills no disk: later output is dropped (and said so)
TAIL_LINES = 8  # lines of a dead process's output shown in its notice


class RewardLog:
    """The reward's log: what its processes print, line by line (`[worker N] ...`), and rolecall's own
    `[rolecall] ...` lines on what happened to them. Thread-safe; starts in a temporary file."""

    def __init__(self) -> None:
        fd, path = tempfile.mkstemp(prefix="rolecall-reward-", suffix=".log")
        self.path, self.temporary = Path(path), True
        self._file = os.fdopen(fd, "ab")
        self._lock = threading.Lock()
        self._size, self._capped = 0, False
        self._partial: dict[int, bytes] = {}
        self._tails: dict[int, deque[str]] = {}

    def output(self, worker: int, chunk: bytes) -> None:
        """A chunk worker `worker` printed; b"" when its stream ended (a last partial line is written)."""
        with self._lock:
            data = self._partial.pop(worker, b"") + chunk
            lines = data.split(b"\n")
            rest = lines.pop()
            if rest and chunk and len(rest) < 65536:
                self._partial[worker] = rest
            elif rest:
                lines.append(rest)
            for raw in lines:
                text = raw.decode("utf-8", "replace").rstrip("\r")
                self._tails.setdefault(worker, deque(maxlen=TAIL_LINES)).append(text)
                self._write(f"[worker {worker}] {text}\n")

    def event(self, text: str) -> None:
        with self._lock:
            self._write(f"[rolecall] {text}\n")

    def tail(self, worker: int) -> list[str]:
        with self._lock:
            return list(self._tails.get(worker, ()))

    def forget_tail(self, worker: int) -> None:
        """A new request starts: a crash's tail shows what this call printed, not an earlier one."""
        with self._lock:
            self._tails.pop(worker, None)

    def has_output(self) -> bool:
        with self._lock:
            return any(self._tails.values())

    def move_to(self, dest: Path) -> None:
        """Continue in `dest` (appended to, as on a resume), with what was written so far."""
        dest = Path(dest)
        with self._lock:
            if self._file is None or dest == self.path:
                return
            self._file.flush()
            old, old_path, was_temp = self._file, self.path, self.temporary
            new = open(dest, "ab")  # noqa: SIM115 - kept open, closed by close()
            with open(old_path, "rb") as f:
                while block := f.read(1 << 20):
                    new.write(block)
            new.flush()
            old.close()
            if was_temp:
                old_path.unlink(missing_ok=True)
            self._file, self.path, self.temporary = new, dest, False

    def close(self, keep: bool) -> None:
        """Close; a temporary log nobody was told about is removed."""
        with self._lock:
            if self._file is None:
                return
            self._file.close()
            self._file = None
            if self.temporary and not keep:
                self.path.unlink(missing_ok=True)

    def _write(self, text: str) -> None:
        if self._file is None or self._capped:
            return
        data = text.encode("utf-8", "replace")
        if self._size + len(data) > LOG_CAP_BYTES:
            self._capped = True
            data = f"[rolecall] the log reached {LOG_CAP_BYTES >> 20} MiB: later output is dropped\n".encode()
        self._file.write(data)
        self._file.flush()
        self._size += len(data)
