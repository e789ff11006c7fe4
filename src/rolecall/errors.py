"""The one base class of mistakes a user can make or fix: the CLI prints them, never a traceback.

Each subclass also derives from the builtin it refines (ValueError, RuntimeError ...), so
library callers that catch those keep working.
"""
from __future__ import annotations


class UserError(Exception):
    """A wrong input or an unusable resource the user named (a config value, a path, a dataset
    row, a damaged checkpoint, a busy run directory, a sandbox that cannot isolate). The
    message names the problem and, where there is one, the way out."""
