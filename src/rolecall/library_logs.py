"""Library chatter (transformers' weight-loading bar, its and PEFT's log lines, Python
warnings such as FutureWarning) goes to a file in the run directory, not the user's terminal,
so `rolecall train` shows rolecall's own progress. `--verbose` leaves it on the terminal.
"""
from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

LOG_NAME = "library.log"
_LOGGERS = ("transformers", "peft", "accelerate", "torch", "bm25s")


class _Deferred(logging.Handler):
    """Appends to `path` once `ready()` says its folder may be written; until then keeps what was said
    in memory (capped), so chatter while a run loads never creates or touches a folder that is not
    yet the run's."""

    CAP = 1 << 20

    def __init__(self, path: Path, ready: Callable[[], bool]) -> None:
        super().__init__()
        self.path, self.ready, self.pending, self.size = path, ready, [], 0
        self.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.write(self.format(record) + "\n")
        except Exception:  # noqa: BLE001 - logging never raises into the caller
            self.handleError(record)

    def write(self, text: str) -> None:
        if self.size < self.CAP:
            self.pending.append(text)
            self.size += len(text)
        self.flush()

    def flush(self) -> None:
        if self.pending and self.ready():
            with open(self.path, "a", encoding="utf-8") as f:
                f.write("".join(self.pending))
            self.pending, self.size = [], 0


@contextlib.contextmanager
def library_output_to(run_dir: Path, name: str = LOG_NAME, *,
                      ready: Callable[[Path], bool] | None = None) -> Iterator[Path]:
    """Send library warnings and log records to `run_dir/<name>` (library.log) while inside the block.

    With `ready`, nothing is written until `ready(run_dir)` is true (a new run's folder is made only
    once every input has loaded); what was said before is written then, and dropped if it never is.
    """
    path = Path(run_dir) / name
    if ready is None:
        path.parent.mkdir(parents=True, exist_ok=True)
    handler = _Deferred(path, (lambda: True) if ready is None else (lambda: ready(path.parent)))
    # First, so that transformers installs its own stderr handler now, where it is replaced below.
    bars = _transformers_bars(False)
    saved = []
    for name in _LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, logger.handlers[:], logger.propagate))
        logger.handlers[:] = [handler]
        logger.propagate = False
    previous_bars = os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS")
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"

    def showwarning(message, category, filename, lineno, file=None, line=None):
        handler.write(warnings.formatwarning(message, category, filename, lineno, line))

    with warnings.catch_warnings():
        warnings.showwarning = showwarning
        try:
            yield path
        finally:
            for logger, handlers, propagate in saved:
                logger.handlers[:] = handlers
                logger.propagate = propagate
            handler.flush()
            handler.close()
            if previous_bars is None:
                os.environ.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
            else:
                os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = previous_bars
            if bars is not None:
                _transformers_bars(bars)


def _transformers_bars(enabled: bool) -> bool | None:
    """Turn transformers' own tqdm bars (weight loading) on or off; returns the previous state."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        return None
    before = hf_logging.is_progress_bar_enabled()
    (hf_logging.enable_progress_bar if enabled else hf_logging.disable_progress_bar)()
    return before
