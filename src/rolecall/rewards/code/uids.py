"""Sandbox uids: one leased per concurrent run (an flock shared across threads and processes),
and killing every process of a uid once its run is over.

Separate from `sandbox.py` because uid bookkeeping (lock files, the passwd check, the
per-process sweep of leftovers) is its own job, used by both the run set-up and its teardown.
"""
from __future__ import annotations

import fcntl
import functools
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from rolecall.rewards.code.private_fs import private_dir

DEFAULT_UID_BASE = 62000
UID_SLOTS = 256


class Lease:
    """Exclusive use of one sandbox uid, across threads and processes (an flock on a file)."""

    def __init__(self, uid: int, fd: int):
        self.uid, self._fd = uid, fd

    def release(self) -> None:
        os.close(self._fd)


_swept_uids: set[int] = set()


def lease_uid(base: int) -> Lease:
    lock_dir = private_dir(Path("/run/rolecall-sandbox") if os.path.isdir("/run")
                           else Path(tempfile.gettempdir()) / "rolecall-sandbox-locks")
    for uid in range(base, base + UID_SLOTS):
        if _uid_has_owner(uid):
            continue
        fd = os.open(lock_dir / f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        if uid not in _swept_uids:   # a run killed along with an earlier trainer may linger
            kill_uid(uid)
            _swept_uids.add(uid)
        return Lease(uid, fd)
    raise OSError(f"all {UID_SLOTS} sandbox uids from {base} are busy")


@functools.lru_cache(maxsize=None)
def _uid_has_owner(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
        return True
    except KeyError:
        return False


def kill_uid(uid: int) -> None:
    """SIGKILL every process of `uid`: a helper switches to that uid and calls kill(-1)."""
    kill = shutil.which("kill", path="/usr/bin:/bin")
    if kill is None:
        return  # the PID namespace already took everything down with the run
    subprocess.run([kill, "-9", "-1"], user=uid, group=uid, extra_groups=[], env={},
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   close_fds=True, timeout=10, check=False)
