"""Commands that read a run directory: eval, export, generate, report, inspect."""
from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Optional

import typer

from rolecall.cli.common import as_user_errors, console, fail, library_chatter, split_config_args


def eval_cmd(
    target: Optional[str] = typer.Argument(None, help="A run directory (its latest checkpoint; with --best its best) or a "
                                           "config YAML; omitted = the embedded default config."),
    overrides: list[str] = typer.Argument(None, help="dotted.key=value overrides"),
    base: bool = typer.Option(False, "--base", help="Evaluate the base model (adapters disabled)."),
    best: bool = typer.Option(False, "--best", help="Evaluate the run's best validated checkpoint (checkpoints/best.json)."),
    step: Optional[int] = typer.Option(None, "--step", help="Evaluate the checkpoint of this step (default: the latest)."),
    skip_damaged: bool = typer.Option(False, "--skip-damaged", help="When the latest checkpoint is damaged, use "
                                      "the newest sound one (saying which was skipped); refused otherwise."),
    verbose: bool = typer.Option(False, "--verbose", help="Show the libraries' own output (weight-loading bars, "
                                 "warnings) here instead of in the run's library.log."),
) -> None:
    """Validation accuracy of the workflow's final answer, printed as JSON."""
    # imported here: keeps rolecall --help and config checks from loading torch
    from rolecall.api import evaluate

    config, overrides = split_config_args(target, list(overrides or []))  # `eval --base task.n_val=50`: no CONFIG
    run_dir = config if config is not None and config.is_dir() else None
    if run_dir is not None and not (run_dir / "config.yaml").is_file():
        fail(f"{target!r} is a directory but not a run directory (no config.yaml)")
    # as_user_errors: ConfigError, a damaged or missing checkpoint, a verifier that cannot start
    with as_user_errors(), library_chatter(run_dir, verbose):
        result = evaluate(run_dir or (target if config is not None else None), base=base, overrides=overrides, best=best,
                          step=step, skip_damaged=skip_damaged, notify=_say)
    sys.stdout.write(json.dumps(json_safe(result), indent=2) + "\n")


def _say(text: str) -> None:
    console.print(text, highlight=False, soft_wrap=True, markup=False)


def json_safe(metrics: dict) -> dict:
    """NaN and infinities (a rate with nothing to count, e.g. abstention precision with no
    abstention) as null: `NaN` is not JSON, and jq or a strict parser would reject the output."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in metrics.items()}


def export(
    run_dir: Path = typer.Argument(..., help="A run directory."),
    out: Optional[Path] = typer.Option(None, "--out", help="Where to write (default <run>/export/step_N)."),
    step: Optional[int] = typer.Option(None, "--step", help="The checkpoint's step (default: the latest complete one)."),
    best: bool = typer.Option(False, "--best", help="The run's best validated checkpoint (checkpoints/best.json)."),
    merge: bool = typer.Option(False, "--merge", help="Write full models with each adapter merged into the base."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing export."),
    skip_damaged: bool = typer.Option(False, "--skip-damaged", help="When the latest checkpoint is damaged, use "
                                      "the newest sound one (saying which was skipped); refused otherwise."),
    verbose: bool = typer.Option(False, "--verbose", help="Show the libraries' own output (weight-loading bars, "
                                 "warnings) here instead of in the run's library.log."),
) -> None:
    """Each policy's trained adapter (or merged model) with tokenizer, chat template and model card."""
    from rolecall.export import export_run

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with as_user_errors(), library_chatter(run_dir, verbose):
        written = export_run(run_dir, out, step=step, merge=merge, overwrite=force, best=best,
                             skip_damaged=skip_damaged, notify=_say)
    for path in written:
        console.print(f"wrote {path}", highlight=False, soft_wrap=True)


def generate(
    run_dir: Path = typer.Argument(..., help="A run directory."),
    role: str = typer.Option(..., "--role", help="The role to play, e.g. generator."),
    prompt: str = typer.Option(..., "--prompt", help="The user message ('-' reads stdin)."),
    step: Optional[int] = typer.Option(None, "--step", help="The checkpoint's step (default: the latest complete one)."),
    best: bool = typer.Option(False, "--best", help="The run's best validated checkpoint (checkpoints/best.json)."),
    temperature: float = typer.Option(0.0, "--temperature", help="0 = greedy."),
    max_new_tokens: Optional[int] = typer.Option(None, "--max-new-tokens", help="Default: the run's budget for the role."),
    skip_damaged: bool = typer.Option(False, "--skip-damaged", help="When the latest checkpoint is damaged, use "
                                      "the newest sound one (saying which was skipped); refused otherwise."),
    verbose: bool = typer.Option(False, "--verbose", help="Show the libraries' own output (weight-loading bars, "
                                 "warnings) here instead of in the run's library.log."),
) -> None:
    """One role's reply to a prompt with the run's trained weights, printed to stdout."""
    from rolecall.api import generate as run_generate
    from rolecall.cli.common import check_number

    check_number("--temperature", temperature, at_least=0)
    check_number("--max-new-tokens", max_new_tokens, above=0)
    text = sys.stdin.read() if prompt == "-" else prompt
    with as_user_errors(), library_chatter(run_dir, verbose):
        reply = run_generate(run_dir, role, text, step=step, temperature=temperature, max_new_tokens=max_new_tokens,
                             best=best, skip_damaged=skip_damaged, notify=_say)
    sys.stdout.write(reply + "\n")


def report(
    run_dirs: list[Path] = typer.Argument(..., help="One or more run directories (overlaid)."),
    control: Optional[Path] = typer.Option(None, "--control", help="A single-agent RL run drawn as a reference."),
    out: Optional[Path] = typer.Option(None, "--out", help="HTML file to write (default <first run>/report.html)."),
    title: Optional[str] = typer.Option(None, "--title", help="Page title."),
) -> None:
    """Write one self-contained HTML report: accuracy, per-role diagnostics, lengths, alarms."""
    from rolecall.report import write_report

    target = out or run_dirs[0] / "report.html"
    with as_user_errors():  # ReportError, an unwritable --out
        path = write_report(list(run_dirs), target, control=control, title=title)
    console.print(f"wrote {path}", highlight=False, soft_wrap=True)


def inspect(
    run_dir: Path = typer.Argument(..., help="A run directory."),
    role: str = typer.Option(..., "--role", help="The role to read, e.g. aggregator."),
    steps: Optional[str] = typer.Option(None, "--steps", help="Comma-separated steps (default: first, middle, last)."),
    problems: int = typer.Option(4, "--problems", help="How many problems to show."),
    width: int = typer.Option(400, "--chars", help="Characters shown per output."),
) -> None:
    """Print one role's outputs on the same problems side by side across training steps."""
    from rich.console import Console as OutConsole
    from rich.markup import escape
    from rich.table import Table

    from rolecall.cli.common import check_number
    from rolecall.diagnostics.inspect import load_view, parse_steps

    check_number("--problems", problems, above=0)
    check_number("--chars", width, above=0)

    with as_user_errors():
        view = load_view(run_dir, role, parse_steps(steps), max_problems=problems)
    out = OutConsole()
    out.print(f"role [bold]{escape(role)}[/] in {escape(str(run_dir))} ({view.source}), steps {view.steps}", highlight=False)
    for (uid, problem, slot), cells in view.rows.items():
        table = Table(title=f"{escape(problem[:120])}  [dim]({escape(slot)})[/]", show_lines=True, expand=True)
        for st in view.steps:
            table.add_column(f"step {st}", overflow="fold")
        row = []
        for st in view.steps:
            c = cells.get(st)
            if c is None:
                row.append("[dim]-[/]")
                continue
            text = c.text if len(c.text) <= width else c.text[:width] + " …"
            cut = " [red]truncated[/]" if c.finish == "length" else ""
            row.append(f"{escape(text)}\n[dim]{c.tokens} tokens, reward {c.reward}[/]{cut}")
        table.add_row(*row)
        out.print(table)
