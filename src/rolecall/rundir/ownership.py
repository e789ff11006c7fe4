"""Which folders a new run may write into: an empty or missing one, or one rolecall marked as its run.

`--out` never touches what rolecall did not write: a folder holding anything else (a user's
own `config.yaml`, `samples.jsonl`, notes) is refused before a byte is written, naming what is
there. A run directory carries a marker file, written first when the folder is made, so a run
that failed while starting can be started again in the same place, and a run that logged steps
is never started over (it is resumed).

Runs made before the marker existed still count as runs for everything that reads or resumes
them (`--resume`, eval, export, report): those need only `config.yaml`.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from rolecall.errors import UserError

MARKER = "rolecall-run.json"
# What rolecall itself may leave in a folder before the run's own files exist: the lock of a
# process that held it, and a grid's record of a cell's failed attempt.
_OWN_LEFTOVERS = (".lock", "grid-failed.txt", "grid-failed.traceback")


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
    import fcntl

    from rolecall.rundir.directory import LOCK, RunDirBusy, holder

    try:
        fd = os.open(path / LOCK, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return  # no lock file: nobody holds it
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise RunDirBusy(f"run directory {str(path)!r} is in use by another rolecall process "
                         f"({holder(path / LOCK)}); wait for it to finish or stop it first") from None
    except OSError:
        pass  # a filesystem without locks: `hold` warns when the run starts
    finally:
        os.close(fd)


def mark(path: Path) -> None:
    """Write the marker: from now on the folder is this run's. Written first, before any other file."""
    from rolecall import __version__

    body = json.dumps({"rolecall": __version__, "created": time.strftime("%Y-%m-%d %H:%M:%S"),
                       "pid": os.getpid()}) + "\n"
    (Path(path) / MARKER).write_text(body)
