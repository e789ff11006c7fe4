"""What the runner's processes write: JSON records on the results pipe and the test child's
status lines, with the constants both ends of those channels agree on.

Stdlib only, never imports rolecall: a sibling script of `runner.py`, imported from this
directory at start-up (before the private root hides it). Separate so that the boot
(`runner.py`), the server (`runner_server.py`) and the test child (`runner_child.py`) share
one definition without importing each other.
"""
from __future__ import annotations

import json
import os

STATUS_FD = 3             # where a test child reports how its program ended
SETUP_DONE = b"ready"     # first line on that fd once the child is set up
DETAIL_CHARS = 300
SOURCE_NAME = "solution.py"


def emit(fd: int, record: dict) -> None:
    data = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8", "replace")
    while data:
        data = data[os.write(fd, data):]


def short(text: str) -> str:
    return " ".join(str(text).split())[:DETAIL_CHARS]
