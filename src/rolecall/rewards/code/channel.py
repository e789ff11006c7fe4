"""Parent side of the results pipe: `RunResult` and the loop that reads one run's records.

Reads newline-delimited JSON records from the child until EOF, the deadline (a start-up
deadline until the jail reports ready, then the run's), or an early stop requested by the
caller; checks their order and the run's nonce. Separate from `sandbox.py` because it is
pure protocol (no processes, no files), and because the verdict code (`verdicts.py`) needs
`RunResult` without depending on the sandbox.
"""
from __future__ import annotations

import json
import os
import secrets
import select
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from rolecall.rewards.code.limits import SandboxLimits

# The jail must be up (before any model code runs) within this; otherwise the run is unscorable.
STARTUP_S = 15.0


@dataclass
class RunResult:
    """What one run produced, before any verdict: raw per-test records from the child."""

    records: list[dict[str, Any]] = field(default_factory=list)
    ready: bool = False          # the jail came up; from here on failures are the code's
    finished: bool = False       # the server printed this run's nonce after the last test
    killed: str | None = None    # "deadline" or "early_stop" when the parent ended the run
    infra_error: str | None = None
    server_exit: str | None = None
    sandbox_uid: int | None = None
    elapsed_s: float = 0.0


def collect(result: RunResult, fd: int, n: int, limits: SandboxLimits, nonce: str,
            on_record: Callable[[dict], bool] | None) -> None:
    """Read the results channel until EOF, the deadline, or an early stop."""
    buf = bytearray()
    deadline = time.monotonic() + STARTUP_S
    poller = select.poll()          # not select(): a trainer's fds can be numbered past 1024
    poller.register(fd, select.POLLIN)
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                if result.ready:
                    result.killed = "deadline"
                else:
                    result.infra_error = f"the sandbox did not start within {STARTUP_S:.0f} s"
                return
            if not poller.poll(left * 1000):
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return
            buf.extend(chunk)
            while (cut := buf.find(b"\n")) >= 0:
                record = json.loads(bytes(buf[:cut]))
                del buf[:cut + 1]
                if record.get("t") == "ready" and not result.ready:
                    result.ready = True
                    deadline = time.monotonic() + limits.run_deadline_s(n)
                elif not _take(result, record, n, nonce, on_record):
                    return
            if len(buf) > 8 * limits.output_bytes + (1 << 20):
                raise RuntimeError("oversized record on the results channel")
    finally:
        os.close(fd)


def _take(result: RunResult, record: dict, n: int, nonce: str,
          on_record: Callable[[dict], bool] | None) -> bool:
    kind = record.get("t")
    if kind == "test":
        if not result.ready or record.get("i") != len(result.records) or len(result.records) >= n:
            raise RuntimeError(f"results out of order: {str(record)[:80]}")
        result.records.append(record)
        if on_record is not None and on_record(record) is False:
            result.killed = "early_stop"
            return False
    elif kind == "done":
        result.finished = len(result.records) == n and secrets.compare_digest(str(record.get("nonce")), nonce)
    elif kind == "exit":
        result.server_exit = record.get("server")
    elif kind in ("boot_error", "server_error"):
        result.infra_error = f"{kind}: {record.get('msg')}"
    return True
