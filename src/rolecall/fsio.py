"""The one way rolecall writes a file that must survive a crash: the old file or the whole new one.

Checkpoints, run logs, summaries, grid markers and meta-policy stages all write through here,
so a kill -9 at any instant never leaves a torn prefix behind.
"""
from __future__ import annotations

import os
from pathlib import Path

TMP_PREFIX = ".tmp-"  # names of files still being written; a crashed writer's leftovers start with it


def fsync_dir(path: Path) -> None:
    """Make the renames inside `path` durable (one directory sync covers every file put there)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durable(path: Path, data: bytes | str) -> None:
    """Write `path` so that a crash leaves the old file or the whole new one, never a prefix.

    The caller fsyncs `path.parent` once all its files are in (one directory sync, not one per file).
    """
    path = Path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    tmp = path.with_name(f"{TMP_PREFIX}{path.name}-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    os.replace(tmp, path)


def write_atomic(path: Path, data: bytes | str) -> None:
    """`write_durable`, creating the parent folder first and syncing it after the rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_durable(path, data)
    fsync_dir(path.parent)
