"""Host-side files of the code sandbox that only this uid may touch: private directories (run
dirs, uid lock dir) and private files (the job, the nonce).

Separate because both the per-run set-up (`sandbox.py`) and the uid leases (`uids.py`) need
them, and neither should import the other for it.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path


def private_dir(path: Path) -> Path:
    """Create (or check) a directory only we can enter; refuse one someone else prepared."""
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise OSError(f"{path} is not a private directory of uid {os.geteuid()}")
    return path


def write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with open(fd, "w", encoding="utf-8") as f:
        f.write(text)

