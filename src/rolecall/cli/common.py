"""What every `rolecall` command shares: the error console and the one-line report of user errors."""
from __future__ import annotations

import contextlib
import os

import typer
from rich.console import Console

console = Console(stderr=True)


def fail(msg: str) -> None:
    """Print `error: msg` on one line and exit 2."""
    from rich.markup import escape

    # soft_wrap: no hard line breaks inside paths; escape: a message is never markup.
    console.print(f"[bold red]error:[/] {escape(msg)}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def load_config_or_fail(path, overrides: list[str], what: str = ""):
    """The validated config at `path` (None: the embedded default) with `overrides`, or one line
    naming the problem (prefixed by `what`, e.g. the option that named the file) and exit 2."""
    # imported here: keeps rolecall --help from loading torch
    from rolecall.config import ConfigError, load_config

    try:
        return load_config(path, overrides)
    except ConfigError as e:
        fail(f"{what}{e}")


# What a user can cause or fix: a wrong value or path, a missing or unreadable file, a dataset
# row, a damaged checkpoint, a busy run directory, a sandbox that cannot isolate. These print
# one line and exit 2; anything else is a bug in rolecall and keeps its traceback.
def _user_errors():
    from rolecall.errors import UserError

    return (UserError, OSError, ValueError, UnicodeDecodeError)


@contextlib.contextmanager
def as_user_errors(catch_interrupt: bool = True):
    """User errors raised inside become one line and exit 2 (`fail`); Ctrl-C says so and exits 130."""
    try:
        yield
    except _user_errors() as e:
        if os.environ.get("ROLECALL_TRACEBACK"):  # asked for: e.g. to debug one's own workflow
            raise
        fail(_describe(e))
    except KeyboardInterrupt:
        if not catch_interrupt:
            raise
        console.print("interrupted", highlight=False)
        raise typer.Exit(130) from None


def _describe(e: BaseException) -> str:
    # OSErrors from open() say "[Errno 2] No such file or directory: 'x'"; say it plainly.
    if isinstance(e, OSError) and e.strerror and e.filename is not None:
        return f"{e.filename}: {e.strerror}"
    return str(e) or type(e).__name__
