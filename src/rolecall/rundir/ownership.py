"""Who may write a run directory: which folders a new run may use (an empty or missing one, or one
rolecall marked as its run), and the lock that keeps a second process out while one runs.

`--out` never touches what rolecall did not write: a folder holding anything else (a user's
own `config.yaml`, `samples.jsonl`, notes) is refused before a byte is written, naming what is
there. A run directory carries a marker file, written first when the folder is made, so a run
that failed while starting can be started again in the same place, and a run that logged steps
is never started over (it is resumed).

Runs made before the marker existed still count as runs for everything that reads or resumes
them (`--resume`, eval, export, report): those need only `config.yaml`.
"""
from __future__ import annotations

import contextlib
import fcntl
import importlib.metadata
import json
import os
import socket
import time
import warnings
from pathlib import Path

from rolecall.errors import UserError

MARKER = "rolecall-run.json"
# What rolecall itself may leave in a folder before the run's own files exist: the lock of a
# process that held it, and a grid's record of a cell's failed attempt.
_OWN_LEFTOVERS = (".lock", "grid-failed.txt", "grid-failed.traceback")


LOCK = ".lock"


class RunDirBusy(UserError, RuntimeError):
    """Another process holds the run directory."""


@contextlib.contextmanager
def hold(path: Path):
    """Hold run directory `path` for this process, or raise `RunDirBusy` naming the holder.

    An exclusive `flock` on `<run>/.lock`: the kernel drops it when the holder exits, however
    it dies (kill -9 included), so no lock is ever left stuck. Our own children never keep it:
    the descriptor is close-on-exec and the verifiers' subprocesses are exec'd. The file holds
    the holder's pid, host and start time, for the refusal message only.
    """
    path.mkdir(parents=True, exist_ok=True)
    lock = path / LOCK
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise _busy(path) from None
    except OSError as e:  # a filesystem without locks (some NFS mounts): run, but not silently unguarded
        warnings.warn(f"run directory {str(path)!r} cannot be locked ({e.strerror}): a second rolecall process "
                      "on it would not be refused", stacklevel=3)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "started": time.strftime("%Y-%m-%d %H:%M:%S")}).encode())
        yield
    finally:
        os.close(fd)  # releases the lock; the file stays (removing it would race a new holder)


def _busy(path: Path) -> RunDirBusy:
    return RunDirBusy(f"run directory {str(path)!r} is in use by another rolecall process "
                      f"({holder(Path(path) / LOCK)}); wait for it to finish or stop it first")


def holder(lock: Path) -> str:
    try:
        h = json.loads(lock.read_text())
        return f"pid {h['pid']} on {h['host']}, started {h['started']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "pid unknown"


class RunDirRefused(UserError, FileExistsError):
    """`--out` names a folder a new run must not write into."""


def is_marked(path: Path) -> bool:
    return (Path(path) / MARKER).is_file()


def is_run(path: Path) -> bool:
    """A rolecall run: marked, or made by a rolecall older than the marker (its config, its
    metrics and the fingerprint or checkpoints every run writes before its first step)."""
    path = Path(path)
    if is_marked(path):
        return True
    return ((path / "config.yaml").is_file() and (path / "metrics.jsonl").is_file()
            and ((path / "fingerprint.json").is_file() or (path / "checkpoints").is_dir()))


def has_logged(path: Path) -> bool:
    """Whether the folder holds a run that logged at least one row (a new run would erase it)."""
    metrics = Path(path) / "metrics.jsonl"
    return metrics.is_file() and metrics.stat().st_size > 0


def check_new_run_dir(path: Path, *, probe_lock: bool = True) -> None:
    """Raise `RunDirRefused` unless a new run may be made in `path` (`RunDirBusy` when another process
    holds it; `probe_lock=False` when this process does); writes nothing."""
    path = Path(path)
    if not path.exists():
        if path.is_symlink():
            raise RunDirRefused(f"--out {str(path)!r} is a broken symbolic link; choose another directory")
        return
    if not path.is_dir():
        raise RunDirRefused(f"--out {str(path)!r} is a file; a run directory is a directory")
    if probe_lock:
        _refuse_if_held(path)
    if is_run(path) and has_logged(path):
        raise RunDirRefused(f"--out {str(path)!r} already holds a run; use --resume {path} to continue it "
                            "or choose another directory")
    if is_marked(path):
        return  # rolecall's own run that logged nothing yet (it failed while starting): start it again
    entries = sorted(p.name for p in path.iterdir())
    foreign = [n for n in entries if n not in _OWN_LEFTOVERS]
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise RunDirRefused(f"--out {str(path)!r} is not empty and is not a rolecall run (it holds {shown}); "
                            "nothing was written. Choose an empty or new directory")


def _refuse_if_held(path: Path) -> None:
    """`RunDirBusy` naming the holder when another process holds the folder (probed read-only)."""
    try:
        fd = os.open(path / LOCK, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return  # no lock file: nobody holds it
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise _busy(path) from None
    except OSError:
        pass  # a filesystem without locks: `hold` warns when the run starts
    finally:
        os.close(fd)


def mark(path: Path) -> None:
    """Write the marker: from now on the folder is this run's. Written first, before any other file."""
    try:
        version = importlib.metadata.version("rolecall")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree that was never installed
        version = "unknown"
    body = json.dumps({"rolecall": version, "created": time.strftime("%Y-%m-%d %H:%M:%S"),
                       "pid": os.getpid()}) + "\n"
    (Path(path) / MARKER).write_text(body)
