"""Where rolecall keeps files it can rebuild (built-in corpora, search indexes)."""
from __future__ import annotations

import os
from pathlib import Path


def cache_dir(*parts: str) -> Path:
    """`$ROLECALL_CACHE`, else `$XDG_CACHE_HOME/rolecall`, else `~/.cache/rolecall`, joined with `parts`."""
    root = os.environ.get("ROLECALL_CACHE")
    if not root:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rolecall"
    return Path(root).joinpath(*parts)
