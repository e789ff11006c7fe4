"""`rolecall grid`: an experiment matrix in one command, and its report.

spec.py reads the grid file and expands it into cells; plan.py validates every cell's config
and opens every input before anything runs; runner.py runs the cells through an executor and
marks each one done or failed; cells.py is the work of one cell (train, or evaluate the base
model); tables.py computes the paper's tables from the run directories; render.py and
charts.py write them as Markdown, CSV and HTML. docs/grid.md describes the file format.
"""
from rolecall.grid.plan import Plan, make_plan, preflight_inputs
from rolecall.grid.render import write_report
from rolecall.grid.runner import CellJob, CellResult, Executor, SequentialExecutor, execute_cell, run_grid
from rolecall.grid.spec import Cell, Grid, GridError, load_grid

__all__ = ["Cell", "CellJob", "CellResult", "Executor", "Grid", "GridError", "Plan", "SequentialExecutor",
           "execute_cell", "load_grid", "make_plan", "preflight_inputs", "run_grid", "write_report"]
