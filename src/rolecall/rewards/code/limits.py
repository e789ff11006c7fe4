"""Configuration and failure of the code sandbox: `SandboxLimits` (the rlimits and deadlines of
one run) and `SandboxUnavailable` (no acceptable isolation here).

Separate from `sandbox.py` so that the modules that only read limits (the results channel,
callers building a configuration) need not import the process-spawning machinery.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from rolecall.errors import UserError


class SandboxUnavailable(UserError, RuntimeError):
    """The isolation code rewards need cannot be had here, and the caller did not opt out."""


@dataclass(frozen=True)
class SandboxLimits:
    """Limits of one run. Every rlimit is set with hard = soft, so the code cannot raise it."""

    timeout_s: float = 6.0
    """Wall time per test. The whole run gets timeout_s * n_tests + grace_s, at most max_total_s."""
    memory_mb: int = 1024
    """RLIMIT_AS of every process the code runs in; running out is `memory_limit`."""
    cpu_s: int | None = None
    """RLIMIT_CPU of each test process; None means ceil(timeout_s) + 1."""
    file_size_mb: int = 16
    """RLIMIT_FSIZE: the largest file the code can write, stdout/stderr captures included."""
    nproc: int = 16
    """RLIMIT_NPROC: processes + threads of the sandbox uid; a fork bomb stops here."""
    nofile: int = 64
    """RLIMIT_NOFILE: open file descriptors per process."""
    output_bytes: int = 1 << 20
    """Captured stdout/stderr (or serialized return value) per test; more is `output_limit`."""
    grace_s: float = 2.0
    """Added once to the run's deadline (process start-up, per-test overheads)."""
    max_total_s: float = 300.0
    """Hard cap on a run's deadline, whatever the number of tests."""
    tmpfs_mb: int = 64
    """Size of each private tmpfs (run dir, /tmp, /dev/shm) with a private filesystem."""

    def __post_init__(self):
        for name in ("timeout_s", "memory_mb", "file_size_mb", "nproc", "nofile", "output_bytes",
                     "max_total_s", "tmpfs_mb"):
            if not getattr(self, name) > 0:
                raise ValueError(f"SandboxLimits.{name} must be > 0, got {getattr(self, name)!r}")
        if self.grace_s < 0 or (self.cpu_s is not None and self.cpu_s < 1):
            raise ValueError("SandboxLimits: grace_s must be >= 0 and cpu_s >= 1 (or None)")

    @property
    def cpu_limit(self) -> int:
        return self.cpu_s if self.cpu_s is not None else math.ceil(self.timeout_s) + 1

    def run_deadline_s(self, n_tests: int) -> float:
        return min(self.timeout_s * n_tests + self.grace_s, self.max_total_s)

