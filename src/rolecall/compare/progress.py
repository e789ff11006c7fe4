"""The terminal view of a running comparison: the grid's view (a bar over units, one over the current
unit's steps) with evaluations shown problem by problem."""
from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape

from rolecall.grid.progress import GridProgress


class CompareProgress(GridProgress):
    def __init__(self, console: Console, out: Path, n_units: int) -> None:
        super().__init__(console, Path(out) / "runs", n_units)
        self.progress.update(self.cells, description="compare")

    def evaluating(self, name: str, done: int, total: int) -> None:
        self.progress.reset(self.steps, total=max(total, 1), completed=done, visible=True,
                            description=f"eval {name}"[:40], info="problems answered")

    def evaluated(self, name: str, doc: dict | None) -> None:
        acc = (doc or {}).get("accuracy")
        shown = "–" if acc is None else f"{acc:.3f}"
        self.say(f"[green]done[/]    eval {escape(name)}  accuracy {shown} over {(doc or {}).get('episodes', 0)} answers")
        self.progress.advance(self.cells)
        self.progress.update(self.steps, visible=False)
