"""End of one sandbox run: kill everything it started, release its uid, remove its files.

Separate from `sandbox.py` because it must run whatever happened before (spawn failures,
protocol errors, deadlines) and only needs what a run left behind, not how it was started.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

from rolecall.rewards.code.channel import RunResult
from rolecall.rewards.code.uids import Lease, kill_uid


def teardown(proc: subprocess.Popen | None, lease: Lease | None, host: Path | None, result: RunResult) -> None:
    """Kill everything the run started, whatever happened, then remove its files."""
    if proc is not None:
        _kill_group(proc.pid)     # before reaping, so that the group id cannot have been reused
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            result.infra_error = result.infra_error or "the sandbox did not exit after SIGKILL"
    if lease is not None:
        try:
            kill_uid(lease.uid)
        except (OSError, subprocess.SubprocessError):
            pass    # no helper could be spawned; the PID namespace already took the run down
        lease.release()
    if host is not None:
        if result.infra_error:
            try:
                log = (host / "boot.log").read_bytes()[:500].decode("utf-8", "replace").strip()
                result.infra_error += f" [{log}]" if log else ""
            except OSError:
                pass
        shutil.rmtree(host, ignore_errors=True)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
