"""The grid directory on disk: its index, one run directory per cell, and each cell's markers.

    DIR/grid.json                  the index: axes (name, role, config keys) and cells (name, kind, labels, overrides)
    DIR/grid.yaml                  the grid file as it was given
    DIR/<cell>/...                 an ordinary run directory (config.yaml, metrics.jsonl, summary.json, ...)
    DIR/<cell>/grid-done.json      written after the cell's run completed: a finished cell is never run again
    DIR/<cell>/grid-failed.txt     the one-line error of the cell's last attempt (grid-failed.traceback beside it)

Markers, not checkpoints, say a cell is finished: a run killed after its last checkpoint but
before its summary is not finished.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from rolecall.fsio import write_atomic
from rolecall.grid.spec import Grid, GridError

INDEX = "grid.json"
DONE = "grid-done.json"
FAILED = "grid-failed.txt"
TRACEBACK = "grid-failed.traceback"


def write_index(out: Path, grid: Grid, cells: list) -> None:
    index = {"grid": str(grid.path), "vars": grid.vars, "overrides": grid.cli_overrides,
             "axes": [{"name": a.name, "role": a.role, "keys": a.keys, "labels": [v.label for v in a.values]}
                      for a in grid.axes],
             "cells": [c.to_json() for c in cells]}
    write_atomic(out / INDEX, json.dumps(index, indent=1) + "\n")
    write_atomic(out / "grid.yaml", grid.path.read_text("utf-8"))


def read_index(out: Path) -> dict:
    path = Path(out) / INDEX
    if not path.is_file():
        raise GridError(f"{str(out)!r} is not a grid directory (no {INDEX}); run `rolecall grid GRID.yaml --out {out}` first")
    try:
        index = json.loads(path.read_text("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise GridError(f"{path}: unreadable grid index ({e})") from None
    if not isinstance(index, dict) or not isinstance(index.get("cells"), list):
        raise GridError(f"{path}: not a grid index (no cell list)")
    return index


def mark_done(cell_dir: Path, seconds: float) -> None:
    (cell_dir / FAILED).unlink(missing_ok=True)
    (cell_dir / TRACEBACK).unlink(missing_ok=True)
    write_atomic(cell_dir / DONE, json.dumps({"finished": time.strftime("%Y-%m-%d %H:%M:%S"),
                                              "seconds": round(seconds, 1)}) + "\n")


def mark_failed(cell_dir: Path, error: str, traceback: str) -> None:
    write_atomic(cell_dir / FAILED, error + "\n")
    write_atomic(cell_dir / TRACEBACK, traceback)


def status(cell_dir: Path) -> tuple[str, str | None]:
    """("done" | "failed" | "started" | "pending", the recorded error of a failed cell)."""
    if (cell_dir / DONE).is_file():
        return "done", None
    if (cell_dir / FAILED).is_file():
        return "failed", (cell_dir / FAILED).read_text("utf-8", errors="replace").strip()
    if cell_dir.is_dir() and any(cell_dir.iterdir()):
        return "started", None
    return "pending", None


def prepare(out: Path, resume: bool) -> None:
    """Without resume an existing non-empty directory is refused: a grid never mixes into another's runs."""
    if out.exists() and not out.is_dir():
        raise GridError(f"--out {str(out)!r} is a file; a grid directory is a directory")
    if not resume and out.is_dir() and any(out.iterdir()):
        raise GridError(f"grid directory {str(out)!r} already exists and is not empty; pass --resume to continue "
                        "that grid (finished cells are skipped) or choose another --out")
    out.mkdir(parents=True, exist_ok=True)
