"""Run a planned grid: skip finished cells, run the others through an executor, mark each one.

`execute_cell` is the unit of work: it runs one cell and writes its marker (done, or failed
with the one-line error), so a failed cell never stops the grid. An `Executor` decides where
and in what order units run; `SequentialExecutor` runs them one after another in this
process. A remote executor (`remote = True`, e.g. `ray_executor.RayExecutor`) ships
`work(job)` to other processes sharing the grid directory and yields results as they
complete; its `work` carries no listener (a progress view cannot cross processes).
"""
from __future__ import annotations

import functools
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Protocol, Sequence

from rolecall.schema import Config
from rolecall.grid import layout
from rolecall.grid.plan import Plan, one_line
from rolecall.grid.spec import Cell

OnEvent = Callable[[str, dict], None]  # (kind, row): the trainer's step/val/alarm rows, and "notice" {"text"}


@dataclass(frozen=True)
class CellJob:
    cell: Cell
    config: Config
    path: Path  # the cell's run directory


@dataclass(frozen=True)
class CellResult:
    name: str
    status: str  # "done" | "failed" | "skipped" (finished in an earlier invocation)
    seconds: float = 0.0
    error: str | None = None


CellRunner = Callable[[CellJob, OnEvent], None]  # does the cell's work into job.path; raises on failure


class Listener(Protocol):
    """What a progress view is told; every method is optional work for the view, never for the grid."""

    def started(self, job: CellJob) -> None: ...
    def event(self, job: CellJob, kind: str, row: dict) -> None: ...
    def finished(self, result: CellResult) -> None: ...


class Executor(Protocol):
    def run(self, jobs: Sequence[CellJob], work: Callable[[CellJob], CellResult]) -> Iterator[CellResult]:
        """Run `work` on every job, yielding each result when it is known."""
        ...


class SequentialExecutor:
    """One cell after another, in grid order, in this process."""

    def run(self, jobs: Sequence[CellJob], work: Callable[[CellJob], CellResult]) -> Iterator[CellResult]:
        for job in jobs:
            yield work(job)


def describe_error(e: BaseException) -> str:
    if isinstance(e, OSError) and e.strerror and e.filename is not None:
        return f"{e.filename}: {e.strerror}"
    from rolecall.errors import UserError

    text = one_line(str(e)) or type(e).__name__
    # A user error says what is wrong in its message; anything else is a bug: keep its type.
    return text if isinstance(e, (UserError, ValueError, OSError)) else f"{type(e).__name__}: {text}"


def execute_cell(job: CellJob, runner: CellRunner, listener: Listener | None = None) -> CellResult:
    """Run one cell; mark it done, or failed with its one-line error. A stop (Ctrl-C) is not a failure."""
    from rolecall.rundir.stop import TrainingStopped

    job.path.mkdir(parents=True, exist_ok=True)
    (job.path / layout.FAILED).unlink(missing_ok=True)  # this attempt's outcome replaces the last one's
    if listener:
        listener.started(job)
    on_event: OnEvent = (lambda kind, row: listener.event(job, kind, row)) if listener else (lambda kind, row: None)
    t0 = time.monotonic()
    try:
        runner(job, on_event)
    except (KeyboardInterrupt, TrainingStopped):
        raise  # the whole grid stops; the cell resumes from its last checkpoint with --resume
    except Exception as e:  # noqa: BLE001 - one cell's failure, whatever it is, must not stop the grid
        error = describe_error(e)
        layout.mark_failed(job.path, error, traceback.format_exc())
        return CellResult(job.cell.name, "failed", time.monotonic() - t0, error)
    seconds = time.monotonic() - t0
    layout.mark_done(job.path, seconds)
    return CellResult(job.cell.name, "done", seconds)


def run_grid(plan: Plan, out: Path, runner: CellRunner, *, resume: bool = False,
             executor: Executor | None = None, listener: Listener | None = None,
             cells: Sequence[Cell] | None = None) -> list[CellResult]:
    """Run every cell of `plan` (or of `cells`, a part of it) not already finished in `out`;
    returns one result per cell run or skipped, in grid order. The directory's index always
    lists the whole grid, so a part run now and the rest run later (or elsewhere) make one grid."""
    out = Path(out)
    layout.prepare(out, resume)
    layout.write_index(out, plan.grid, plan.cells)
    results: dict[str, CellResult] = {}
    jobs = []
    for cell in plan.cells if cells is None else cells:
        path = out / cell.name
        if layout.status(path)[0] == "done":
            results[cell.name] = CellResult(cell.name, "skipped")
            if listener:
                listener.finished(results[cell.name])
        else:
            jobs.append(CellJob(cell, plan.configs[cell.name], path))
    executor = executor or SequentialExecutor()
    remote = getattr(executor, "remote", False)
    work = functools.partial(execute_cell, runner=runner, listener=None if remote else listener)
    for result in executor.run(jobs, work):
        results[result.name] = result
        if listener:
            listener.finished(result)
    return [results[c.name] for c in plan.cells if c.name in results]
