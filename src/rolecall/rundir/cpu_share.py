"""Training runs on one machine share its cores instead of fighting over them.

torch's CPU kernels run on an OpenMP team of `torch.get_num_threads()` threads (all cores by
default), and the team's threads spin while they wait for each other. Two runs that each
take every core then spin on cores the other needs: measured on 2 cores, the default
run went from 1.2 s a step alone to 5 s a step each with a second run beside it, where a
fair share is about 2 s (one thread each gives 1.9 s; `OMP_WAIT_POLICY=PASSIVE` gives 2.0 s
but makes a run alone 1.5x slower, so it is not the fix).

So each run whose `train.threads` is 0 (auto) registers here, and before every step takes
cores / (runs registered) threads. A run registers by holding an exclusive `flock` on a file
named by its pid in a per-user folder (`ROLECALL_CPU_SHARE_DIR` overrides it); the kernel
drops the lock when the process dies, however it dies, so a file that can be locked is a
dead run's and is removed. Runs of other programs are not counted.
"""
from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path


def share_dir() -> Path:
    env = os.environ.get("ROLECALL_CPU_SHARE_DIR")
    if env:
        return Path(env)
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
    return Path(base) / f"rolecall-cpu-{os.getuid()}"


def machine_cores() -> int:
    """Cores this process may run on (its affinity mask, as taskset or a container's cpuset sets it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class CpuShare:
    """This process's place among the training runs of the machine; `apply()` sets its threads."""

    def __init__(self, directory: Path | None = None) -> None:
        self.dir = Path(directory) if directory is not None else share_dir()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.cores = machine_cores()
        self.threads: int | None = None
        self.path = self.dir / str(os.getpid())
        # Locked under a temporary name, then renamed: another run never sees it unlocked.
        tmp = self.dir / f".{os.getpid()}.tmp"
        self.fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.replace(tmp, self.path)

    def running(self) -> int:
        """Live registered runs, this one included; removes dead runs' files."""
        n = 0
        for f in self.dir.iterdir():
            if f.name.startswith("."):
                continue
            if f == self.path:
                n += 1
                continue
            try:
                fd = os.open(f, os.O_RDWR | os.O_CLOEXEC)
            except OSError:  # removed meanwhile, or not ours to open
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                n += 1  # locked: its run is alive
            else:
                f.unlink(missing_ok=True)  # nobody holds it: that run is gone
            finally:
                os.close(fd)
        return max(n, 1)

    def apply(self) -> int:
        """Take this run's share of the cores (at least one thread); returns the thread count."""
        import torch

        threads = max(1, self.cores // self.running())
        if threads != self.threads:
            torch.set_num_threads(threads)
            self.threads = threads
        return threads

    def close(self) -> None:
        if self.fd >= 0:
            self.path.unlink(missing_ok=True)
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> "CpuShare":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def cpu_share_or_none(threads: int) -> CpuShare | None:
    """A registration when the run's thread count is automatic (train.threads 0), else None.
    A folder that cannot be written leaves the run on torch's default, as before."""
    if threads:
        return None
    try:
        return CpuShare()
    except OSError:
        return None
