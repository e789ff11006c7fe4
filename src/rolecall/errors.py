"""The one base class of mistakes a user can make or fix: the CLI prints them, never a traceback.

Each subclass also derives from the builtin it refines (ValueError, RuntimeError ...), so
library callers that catch those keep working.
"""
from __future__ import annotations


class UserError(Exception):
    """A wrong input or an unusable resource the user named (a config value, a path, a dataset
    row, a damaged checkpoint, a busy run directory, a sandbox that cannot isolate). The
    message names the problem and, where there is one, the way out."""


def one_line(e: Exception) -> str:
    """An exception's message on one line; a YAML error as what went wrong and where."""
    mark = getattr(e, "problem_mark", None)
    if getattr(e, "problem", None) and mark is not None:  # a MarkedYAMLError: say what and where, briefly
        return f"{e.problem} (line {mark.line + 1}, column {mark.column + 1})"
    return " ".join(str(e).split())
