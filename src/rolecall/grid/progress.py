"""The terminal view of a running grid: a bar over cells, a bar over the current cell's steps,
one line per finished cell, and a closing table of every cell's outcome."""
from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from rolecall.grid.runner import CellJob, CellResult

STYLE = {"done": "green", "skipped": "dim", "failed": "bold red"}


def duration(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def accuracy_line(run_dir: Path) -> str:
    """`peak 0.532 @ 40, final 0.510` from a finished run's summary.json ('' when there is none)."""
    try:
        acc = json.loads((run_dir / "summary.json").read_text("utf-8"))["accuracy"]
    except (OSError, ValueError, KeyError, TypeError):
        return ""
    if acc.get("peak") is None:
        return ""
    if acc.get("final_step") == 0:  # a base-model evaluation: one validation
        return f"val {acc['final']:.3f}"
    if acc.get("peak_step") == acc.get("final_step"):
        return f"peak {acc['peak']:.3f} @ {acc['peak_step']} = final"
    return f"peak {acc['peak']:.3f} @ {acc['peak_step']}, final {acc['final']:.3f}"


class GridProgress:
    """A `Listener` drawing on `console` (stderr); use as a context manager around the run."""

    def __init__(self, console: Console, out: Path, n_cells: int) -> None:
        self.console, self.out = console, out
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("{task.fields[info]}"), console=console)
        self.cells = self.progress.add_task("grid", total=n_cells, info="")
        self.steps = self.progress.add_task("cell", total=1, info="", visible=False)
        self.current = ""
        self.results: list[CellResult] = []

    def __enter__(self) -> "GridProgress":
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    def say(self, text: str) -> None:
        self.progress.console.print(text, highlight=False, soft_wrap=True)

    def started(self, job: CellJob) -> None:
        self.current = job.cell.name
        total = 1 if job.cell.kind == "base" else job.config.train.steps
        self.progress.reset(self.steps, total=total, completed=0, visible=True,
                            description=job.cell.name[:40], info="evaluating the base model" if total == 1 else "loading")

    def event(self, job: CellJob, kind: str, row: dict) -> None:
        if kind == "step":
            reward = row.get("reward/mean")
            reward = float("nan") if reward is None else reward
            self.progress.update(self.steps, completed=row["step"],
                                 info=f"reward {reward:.3f}  {row.get('time/step_s') or 0:.1f}s/step")
        elif kind == "val":
            if job.cell.kind == "base":
                self.progress.update(self.steps, completed=1)
            acc = row.get("val/accuracy")  # null in metrics.jsonl when no sample was scorable
            self.say(f"  {escape(job.cell.name)} step {row['step']:>4}  val/accuracy {float('nan') if acc is None else acc:.3f}")
        elif kind == "alarm":
            self.say(f"  [bold yellow]alarm[/] {escape(job.cell.name)} step {row['step']} {escape(str(row.get('alarm')))}: "
                     f"{escape(str(row.get('message', '')))}")
        elif kind == "notice":
            self.say(f"  {escape(job.cell.name)}: {escape(str(row.get('text', '')))}")

    def finished(self, result: CellResult) -> None:
        self.results.append(result)
        self.progress.advance(self.cells)
        name = escape(result.name)
        if result.status == "done":
            self.say(f"[green]done[/]    {name}  {duration(result.seconds)}  {accuracy_line(self.out / result.name)}")
        elif result.status == "failed":
            self.say(f"[bold red]failed[/]  {name}  {escape(result.error or '')}")
        else:
            self.say(f"[dim]skipped {name} (finished earlier)[/]")
        self.progress.update(self.steps, visible=False)

    def table(self) -> Table:
        t = Table(title=f"grid {escape(str(self.out))}", show_lines=False)
        for col in ("cell", "status", "time", "validation / error"):
            t.add_column(col, overflow="fold")
        for r in self.results:
            detail = r.error if r.status == "failed" else accuracy_line(self.out / r.name)
            t.add_row(escape(r.name), f"[{STYLE[r.status]}]{r.status}[/]",
                      duration(r.seconds) if r.status != "skipped" else "", escape(detail or ""))
        return t
