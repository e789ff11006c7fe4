"""`rolecall grid`: run an experiment matrix and report it (`grid_app`, added to the root app)."""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Optional

import typer
from typer.core import TyperGroup

from rolecall.cli.common import as_user_errors, console


class _GridGroup(TyperGroup):
    """`rolecall grid GRID.yaml ...` is `rolecall grid run GRID.yaml ...`; `rolecall grid report DIR` is the report."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = ["run", *args]
        args = list(args)
        if "--ray" in args:  # `--ray` alone means a private local Ray instance
            i = args.index("--ray")
            if i + 1 == len(args) or not _RAY_ADDRESS.match(args[i + 1]):
                args.insert(i + 1, "local")
        return super().parse_args(ctx, args)


_RAY_ADDRESS = re.compile(r"^(local|auto|ray://\S+|[A-Za-z0-9_.-]+:\d+)$")


grid_app = typer.Typer(cls=_GridGroup, no_args_is_help=True,
                       help="Run an experiment matrix (`rolecall grid GRID.yaml`) and report it "
                            "(`rolecall grid report DIR`).")


@grid_app.command("run")
def grid_run(
    grid_file: Path = typer.Argument(..., help="Grid file (docs/grid.md)."),
    args: list[str] = typer.Argument(None, help="var=value (a var of the grid) or dotted.key=value (every cell)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Grid directory (default runs/<grid file name>)."),
    resume: bool = typer.Option(False, "--resume", help="Continue the grid in --out: finished cells are skipped, "
                                "unfinished ones resume from their last checkpoint, failed ones are tried again."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Validate every cell and open every input, print the "
                                 "cells, run nothing."),
    ray: Optional[str] = typer.Option(None, "--ray", metavar="[ADDRESS]",
                                      help="Run each cell as a Ray task: `--ray` alone starts a local Ray instance; "
                                           "an ADDRESS (auto, host:6379, ray://host:10001) joins a cluster."),
    cell_cpus: float = typer.Option(1.0, "--cell-cpus", help="With --ray: CPUs each cell asks for (and its torch threads)."),
    cell_gpus: Optional[float] = typer.Option(None, "--cell-gpus", help="With --ray: GPUs each cell asks for "
                                              "(default: 1 when the cell's model.device is cuda, or auto on a cluster "
                                              "with GPUs; else 0)."),
    only: Optional[list[str]] = typer.Option(None, "--only", metavar="AXIS=LABEL",
                                             help="Run only the cells with this label (repeatable: all must match), "
                                                  "e.g. --only seed=seed2; the directory still indexes the whole grid, "
                                                  "so the rest can run later with --resume."),
    record: Optional[Path] = typer.Option(None, "--record", metavar="FILE",
                                          help="When the cells have run, write the grid's record to FILE (JSON: "
                                               "every cell, the matched comparisons, provenance; `rolecall grid "
                                               "record`)."),
) -> None:
    """Run every cell of a grid file, plus a base-model evaluation and a single-agent RL control per setting.

    Cells run one after another, or as Ray tasks with --ray; a failed cell is recorded and the grid goes on
    (exit 1 at the end)."""
    # imported here: keeps rolecall --help and config checks from loading torch
    from rolecall.grid import layout
    from rolecall.grid.plan import make_plan, select_cells
    from rolecall.grid.progress import GridProgress
    from rolecall.grid.runner import run_grid
    from rolecall.grid.spec import load_grid
    from rolecall.rundir.stop import TrainingStopped
    from rolecall.cli.common import check_number

    check_number("--cell-cpus", cell_cpus, above=0)
    check_number("--cell-gpus", cell_gpus, at_least=0)

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    out = out or Path("runs") / grid_file.stem
    with as_user_errors():
        plan = make_plan(load_grid(grid_file, args or []))
        cells = select_cells(plan, only or [])
        if not dry_run:
            layout.prepare(out, resume)  # refuse a used directory before the inputs are opened
    counts = _counts(cells)
    if _preflight(plan, cells, counts, out, dry_run):
        return
    from rolecall.grid.cells import run_cell

    view = GridProgress(console, out, len(cells))
    executor = None
    if ray:
        from rolecall.grid.ray_executor import RayExecutor

        executor = RayExecutor(address=None if ray == "local" else ray, cpus_per_cell=cell_cpus,
                               gpus_per_cell=cell_gpus, listener=view)
    again = _again(grid_file, args or [], out, only or [], ray)
    try:
        with as_user_errors(catch_interrupt=False), view:
            results = run_grid(plan, out, run_cell, resume=resume, executor=executor, listener=view, cells=cells)
    except TrainingStopped as e:
        console.print(f"{e}\nContinue the grid with: {again}", highlight=False, soft_wrap=True, markup=False)
        raise typer.Exit(e.exit_code) from None
    except KeyboardInterrupt:
        console.print(f"stopped at once; finished cells are kept. Continue the grid with: {again}",
                      highlight=False, soft_wrap=True, markup=False)
        raise typer.Exit(130) from None
    console.print(view.table())
    failed = [r for r in results if r.status == "failed"]
    console.print(f"grid directory: {out} ({counts}; {len(failed)} failed). Report: rolecall grid report {out}",
                  highlight=False, soft_wrap=True)
    if record is not None:
        _write_record(out, record, None, _again(grid_file, args or [], out, only or [], ray).replace(
            " --resume", f" --record {record}"))
    if failed:
        raise typer.Exit(1)


def _preflight(plan, cells, counts: str, out: Path, dry_run: bool) -> bool:
    """Open every input of the plan (an unreadable one is a user error); with `dry_run`, print the
    cells and say what would run. True where nothing is to run."""
    from rolecall.grid.plan import preflight_inputs

    if dry_run:
        for c in cells:
            sys.stdout.write(f"{c.name}\t{c.kind}\t{c.config or '(defaults)'}\t{' '.join(c.overrides)}\n")
    note = lambda line: console.print(line, highlight=False, soft_wrap=True, markup=False)  # noqa: E731
    with as_user_errors():
        n_inputs = preflight_inputs(plan, note)
    if dry_run:
        console.print(f"dry run ok: {len(cells)} cells ({counts}), {n_inputs} distinct inputs; "
                      f"would write {out}", highlight=False, soft_wrap=True)
    return dry_run


def _counts(cells) -> str:
    """"2 runs, 1 control, 0 base evaluations": what a (part of a) grid holds."""
    n = {kind: sum(c.kind == kind for c in cells) for kind in ("run", "control", "base")}
    return ", ".join(f"{n[kind]} {what}{'s' * (n[kind] != 1)}"
                     for kind, what in (("run", "run"), ("control", "control"), ("base", "base evaluation")))


def _again(grid_file: Path, args: list[str], out: Path, only: list[str], ray: str | None) -> str:
    """The command that continues this grid after a stop."""
    again = f"rolecall grid {grid_file} {' '.join(args)} --out {out} --resume".replace("  ", " ")
    again += "".join(f" --only {o}" for o in only)
    return again + (" --ray" + ("" if ray == "local" else f" {ray}") if ray else "")


def _write_record(grid_dir: Path, into: Path, long_controls: Path | None, command: str) -> None:
    from rolecall.grid.record import write

    with as_user_errors():
        doc = write(grid_dir, into, long_dir=long_controls, command=command)
    console.print(f"record: {into} (cells {doc['cells']})", highlight=False, soft_wrap=True, markup=False)


@grid_app.command("record")
def grid_record(
    grid_dir: Path = typer.Argument(..., help="A grid directory written by `rolecall grid`."),
    into: Path = typer.Option(..., "--into", metavar="FILE", help="The record's file (JSON), written whole."),
    long_controls: Optional[Path] = typer.Option(
        None, "--long-controls", metavar="DIR",
        help="A grid directory of longer single-agent controls (same settings and seeds): the comparisons at equal "
             "generated tokens and equal training time read them."),
) -> None:
    """Write a grid's record as its directory stands: every cell (curve, validations, role metrics, alarms,
    slow steps, role shapes, sittings), the paired comparisons against the control, and provenance."""
    from rolecall.grid import layout

    for d in (grid_dir, *([long_controls] if long_controls else [])):
        if not (d / layout.INDEX).is_file():
            console.print(f"error: {d} is not a grid directory (no {layout.INDEX} in it)", highlight=False, markup=False,
                          soft_wrap=True)
            raise typer.Exit(2)
    _write_record(grid_dir, into, long_controls, f"rolecall grid record {grid_dir} --into {into}"
                  + (f" --long-controls {long_controls}" if long_controls else ""))


@grid_app.command("table")
def grid_table(
    record: Path = typer.Argument(..., help="A grid's record (JSON), written by `rolecall grid --record` or "
                                            "`rolecall grid record`."),
    metric: list[str] = typer.Option(["accuracy"], "--metric", metavar="NAME",
                                     help="A validation metric to show (repeatable): accuracy, or a `val/<name>` the "
                                          "workflow logs, named without `val/`."),
    pair: list[str] = typer.Option([], "--pair", metavar="A:B",
                                   help="Two arms to compare paired by seed, A minus B (repeatable)."),
    curve: bool = typer.Option(False, "--curve", help="Also the mean accuracy at every validation step."),
    control_from: Optional[Path] = typer.Option(
        None, "--control-from", metavar="RECORD",
        help="Read the control arm from another grid's record (same task, problems and seeds)."),
    only: Optional[str] = typer.Option(None, "--only", metavar="TABLES",
                                       help="Comma-separated: arms, pairs, control (default: all)."),
) -> None:
    """Markdown tables of a recorded grid: every arm over seeds, the asked pairs with their interval and detectable
    effect, and each method against the control where the grid had one."""
    from rolecall.grid.record_table import PARTS, markdown, parse_pair, read, with_control_from

    with as_user_errors():
        doc = read(record)
        if control_from is not None:
            doc = with_control_from(doc, read(control_from), str(control_from))
        text = markdown(doc, str(record), metrics=tuple(metric), pairs=[parse_pair(p) for p in pair], curve=curve,
                        parts=tuple(only.split(",")) if only else PARTS)
    sys.stdout.write(text)


@grid_app.command("report")
def grid_report(
    grid_dir: Path = typer.Argument(..., help="A grid directory written by `rolecall grid`."),
    out: Optional[Path] = typer.Option(None, "--out", help="Directory for the report files (default <grid dir>/report)."),
    title: Optional[str] = typer.Option(None, "--title", help="Page title."),
    controls: Optional[Path] = typer.Option(
        None, "--controls", help="Another grid directory whose single-agent controls trained longer (its controls, "
        "or its one method cell): equal generated tokens and equal wall time are read against them, since a control "
        "trained on the cells' problems costs far less than a multi-agent cell."),
) -> None:
    """The paper's Table 1, Table 2 and Figs. 2, 3 and 5 over the grid: report.md, report.html and CSV files."""
    from rolecall.grid.render import write_report

    with as_user_errors():
        paths = write_report(grid_dir, out, title, controls)
    for p in paths:
        console.print(f"wrote {p}", highlight=False, soft_wrap=True)
