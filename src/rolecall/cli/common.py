"""What every `rolecall` command shares: the error console and the one-line report of user errors."""
from __future__ import annotations

import contextlib
import math
import os
import re
from pathlib import Path

import typer
from rich.console import Console

console = Console(stderr=True)


def fail(msg: str) -> None:
    """Print `error: msg` on one line and exit 2."""
    from rich.markup import escape

    # soft_wrap: no hard line breaks inside paths; escape: a message is never markup.
    console.print(f"[bold red]error:[/] {escape(msg)}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def debug() -> bool:
    """Whether full tracebacks were asked for: `rolecall --debug` or ROLECALL_TRACEBACK=1 (e.g. to
    debug one's own workflow)."""
    return os.environ.get("ROLECALL_TRACEBACK", "").strip().lower() not in ("", "0", "false", "no")


def check_number(option: str, value: float | int | None, *, above: float | None = None,
                 at_least: float | None = None, at_most: float | None = None) -> None:
    """A numeric command-line option is finite and in range, else one line naming it and exit 2
    (click lets `--timeout nan` through, and nan compares false with every bound)."""
    if value is None:
        return
    if isinstance(value, float) and not math.isfinite(value):
        fail(f"{option}: must be a finite number, got {value}")
    if above is not None and not value > above:
        fail(f"{option}: must be > {above:g}, got {value:g}")
    if at_least is not None and not value >= at_least:
        fail(f"{option}: must be >= {at_least:g}, got {value:g}")
    if at_most is not None and not value <= at_most:
        fail(f"{option}: must be <= {at_most:g}, got {value:g}")


def split_config_args(config: str | None, overrides: list[str]) -> tuple[Path | None, list[str]]:
    """(CONFIG, overrides) of a command line whose first positional may be an override: it is one
    when what is left of its `=` is a dotted key (`workflow.prompts=my.yaml` included), unless it
    names a file that exists (a config called `lr=3e-4.yaml` is still a config)."""
    key, eq, _ = (config or "").partition("=")
    if eq and re.fullmatch(r"[\w-]+(\.[\w-]+)*", key) and not Path(config).is_file():
        return None, [config, *overrides]
    return (Path(config) if config else None), overrides


def load_config_or_fail(path, overrides: list[str], what: str = ""):
    """The validated config at `path` (None: the embedded default) with `overrides`, or one line
    naming the problem (prefixed by `what`, e.g. the option that named the file) and exit 2."""
    # imported here: keeps rolecall --help from loading torch
    from rolecall.config import ConfigError, load_config

    try:
        return load_config(path, overrides)
    except ConfigError as e:
        if debug():  # the traceback, down to the user's own code where that is the cause
            raise
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
        if debug():  # asked for: e.g. to debug one's own workflow
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


def library_chatter(run_dir, verbose: bool):
    """Library chatter (weight-loading bars, warnings) out of the way, as `train` does: into the
    run's library.log when there is a run, else nowhere; `verbose` leaves it on the terminal."""
    if verbose:
        return contextlib.nullcontext()
    from rolecall.library_logs import library_output_to
    from rolecall.rundir.ownership import is_run

    if run_dir is not None and is_run(Path(run_dir)):
        return library_output_to(Path(run_dir), ready=is_run)
    return library_output_to(Path("no-run"), ready=lambda _: False)  # no run to keep it in: dropped
