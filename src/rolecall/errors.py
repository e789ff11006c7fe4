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


TRACEBACK_HINT = "for the traceback: rolecall --debug ..., or ROLECALL_TRACEBACK=1"


def code_error(e: BaseException) -> str:
    """What went wrong in a user's own code, on one line: `badwf.py line 3: SyntaxError: invalid syntax`.

    The place is the innermost frame outside Python's import machinery and installed packages
    (the user's file, not importlib's), shown relative to the working directory when under it."""
    import os
    import sysconfig
    import traceback

    if isinstance(e, SyntaxError) and e.filename:  # the place is in the exception, not the traceback
        where, line, msg = e.filename, e.lineno, e.msg
    else:
        frames = [f for f in traceback.extract_tb(e.__traceback__) if not f.filename.startswith("<")]
        skip = tuple(os.path.realpath(p) + os.sep for p in {
            sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")} |
            {os.path.dirname(os.path.abspath(__file__))})
        own = [f for f in frames if not os.path.realpath(f.filename).startswith(skip)]
        frame = (own or frames or [None])[-1]
        where, line, msg = (frame.filename, frame.lineno, str(e)) if frame else (None, None, str(e))
    text = " ".join(f"{type(e).__name__}: {msg}".split()) if msg else type(e).__name__
    if not where:
        return text
    rel = os.path.relpath(where) if os.path.abspath(where).startswith(os.getcwd() + os.sep) else where
    return f"{rel} line {line}: {text}" if line else f"{rel}: {text}"
