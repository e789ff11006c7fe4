"""`rolecall` command line: train, eval, make-base, report, inspect, grid, verify."""
from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Train multi-agent LLM workflows with reinforcement learning, role by role.")
console = Console(stderr=True)


def _print_version(value: bool) -> None:
    if value:
        from rolecall import __version__

        print(f"rolecall {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                       help="Print rolecall's version and exit.")) -> None:
    """Train multi-agent LLM workflows with reinforcement learning, role by role."""


def _fail(msg: str) -> None:
    from rich.markup import escape

    # soft_wrap: no hard line breaks inside paths; escape: a message is never markup.
    console.print(f"[bold red]error:[/] {escape(msg)}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


# What a user can cause or fix: a wrong value or path, a missing or unreadable file, a dataset
# row, a damaged checkpoint, a busy run directory, a sandbox that cannot isolate. These print
# one line and exit 2; anything else is a bug in rolecall and keeps its traceback.
def _user_errors():
    from rolecall.errors import UserError

    return (UserError, OSError, ValueError, UnicodeDecodeError)


@contextlib.contextmanager
def _as_user_errors(catch_interrupt: bool = True):
    try:
        yield
    except _user_errors() as e:
        if os.environ.get("ROLECALL_TRACEBACK"):  # asked for: e.g. to debug one's own workflow
            raise
        _fail(_describe(e))
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


def _config(config: Optional[Path], overrides: list[str], steps: Optional[int]):
    from rolecall.config import ConfigError, load_config

    if steps is not None:
        overrides = [*overrides, f"train.steps={steps}"]
    try:
        return load_config(config, overrides)
    except ConfigError as e:
        _fail(str(e))


def _split_args(config: Optional[str], overrides: list[str]) -> tuple[Optional[Path], list[str]]:
    # `rolecall train a.b=1` has no CONFIG: the first positional is an override.
    if config is not None and "=" in config and not config.endswith((".yaml", ".yml")):
        return None, [config, *overrides]
    return (Path(config) if config else None), overrides


@app.command()
def train(
    config: Optional[str] = typer.Argument(None, help="YAML config; omitted = the embedded default (voting, Isolated-Policy)."),
    overrides: list[str] = typer.Argument(None, help="dotted.key=value overrides, e.g. routing=shared"),
    out: Optional[Path] = typer.Option(None, "--out", help="Run directory (default runs/<workflow>-<time>)."),
    steps: Optional[int] = typer.Option(None, "--steps", help="Training steps (train.steps)."),
    resume: Optional[Path] = typer.Option(None, "--resume", help="Continue the run in this directory."),
    force: bool = typer.Option(False, "--force", help="With --resume: continue even though the model, tokenizer, "
                               "data, workflow, routing, LoRA or reward differ from the checkpoint's."),
    skip_damaged: bool = typer.Option(False, "--skip-damaged", help="With --resume: move damaged checkpoints "
                                      "to checkpoints/damaged/ (with a copy of the logs) and resume from the newest good one."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the resolved, validated config and exit."),
    verbose: bool = typer.Option(False, "--verbose", help="Show the libraries' own output (weight-loading bars, "
                                 "warnings) here instead of in the run's library.log."),
) -> None:
    """Train the workflow's policies with RL; writes a run directory.

    Ctrl-C or SIGTERM finishes the current step, saves a checkpoint and names the command
    that resumes it; a second one stops at once."""
    from rolecall.config import dump_config

    if force and resume is None:
        _fail("--force only applies with --resume DIR")
    if skip_damaged and resume is None:
        _fail("--skip-damaged only applies with --resume DIR")
    if resume is not None:
        if config is not None and "=" not in config:
            _fail("--resume takes the config from the run directory; do not pass CONFIG too")
        cfg_path = resume / "config.yaml"
        if not cfg_path.is_file():
            _fail(f"--resume {str(resume)!r}: no config.yaml there (not a run directory)")
        cfg = _config(cfg_path, _split_args(config, overrides or [])[1], steps)
        out = resume
    else:
        path, ov = _split_args(config, overrides or [])
        cfg = _config(path, ov, steps)
    if dry_run:
        sys.stdout.write(dump_config(cfg))
        _preflight(cfg)
        return
    if out is None and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        _fail("a data-parallel run (torchrun) needs --out DIR (or --resume DIR): every rank must name "
              "the same run directory")
    out = out or Path("runs") / f"{cfg.workflow.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    if out.exists() and not out.is_dir():
        _fail(f"--out {str(out)!r} is a file; a run directory is a directory")
    _run_training(cfg, out, resume is not None, force, skip_damaged, verbose)


def _preflight(cfg) -> None:
    """Dry run: every input checked (model dir, tokenizer, dataset rows, verifier), no weights loaded."""
    from rolecall.train.loop import preflight

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with _as_user_errors():
        info = preflight(cfg)
    for line in info.pop("data_report"):
        console.print(line, highlight=False, soft_wrap=True)
    from rolecall.advantages import ESTIMATORS, estimator_options

    for name in sorted(ESTIMATORS):  # what algo.estimator (and algo.estimator_options) can be
        mark = "*" if name == cfg.algo.estimator else " "
        opts = ", ".join(f"{k}={v:g}" for k, v in estimator_options(name).items())
        opts = f"options, defaults: {opts}" if opts else "no options"
        console.print(f"{mark} estimator {name:<10} groups by {ESTIMATORS[name].default_group_by:<5} ({opts})",
                      highlight=False, soft_wrap=True)
    console.print(f"preflight ok: {json.dumps(info)}", highlight=False, soft_wrap=True)


def _run_training(cfg, out: Path, resume: bool, force: bool = False, skip_damaged: bool = False,
                  verbose: bool = False) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from rolecall.chatter import library_output_to
    from rolecall.api import train_run
    from rolecall.train.stop import TrainingStopped

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    rank = int(os.environ.get("RANK", "0"))  # under torchrun only rank 0 speaks; the others log to files
    progress = Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.fields[info]}"),
                        console=console, transient=False, disable=rank > 0)
    task = progress.add_task("train", total=cfg.train.steps, info="loading")

    def on_event(kind: str, row: dict) -> None:
        if kind == "alarm":  # each alarm fires once per run; say it where the user is looking
            from rich.markup import escape

            progress.console.print(f"[bold yellow]alarm[/] step {row['step']} {row['alarm']}: {escape(row['message'])}",
                                   highlight=False, soft_wrap=True)
        elif kind == "val":
            progress.console.print(f"step {row['step']:>4}  val/accuracy {row['val/accuracy']:.3f}")
        elif kind == "progress":  # a meta-policy run's SoftRankPO steps
            progress.update(task, total=row["total"], completed=row["done"], info=row["stage"])
        elif kind == "meta":  # a meta-policy run's stages: say each where the user is looking
            acc = next((v for k, v in row.items() if k.endswith("/accuracy")), None)
            if acc is not None and row["stage"] in ("eval", "softrank_eval"):
                what = row.get("arm") or f"SoftRankPO step {row['step']}"
                progress.console.print(f"{row['stage']:<14} {what:<22} val/accuracy {acc:.3f}")
            elif row["stage"] in ("states", "corpus"):
                n = next(v for k, v in row.items() if k.endswith("/rows"))
                progress.console.print(f"{row['stage']:<14} {n} rows in {row['time/elapsed_s']:.0f}s of the run")
        else:
            progress.update(task, completed=row["step"],
                            info=f"reward {row.get('reward/mean', float('nan')):.3f}  {row['time/step_s']:.1f}s/step")

    def notify(text: str) -> None:
        progress.console.print(text, highlight=False, soft_wrap=True, markup=False)

    try:
        chatter = (contextlib.nullcontext() if verbose else
                   library_output_to(out, "library.log" if rank == 0 else f"library-rank{rank}.log"))
        with _as_user_errors(catch_interrupt=False), progress, chatter:
            path = train_run(cfg, out, resume=resume, force=force, skip_damaged=skip_damaged, on_event=on_event,
                             notify=notify).path
    except TrainingStopped as e:
        if rank == 0:
            console.print(str(e), highlight=False, soft_wrap=True, markup=False)
        raise typer.Exit(e.exit_code) from None
    except KeyboardInterrupt:  # a second signal: at once, mid-step; saves are atomic, so the last one holds
        from rolecall.train.checkpoint import latest_checkpoint

        ckpt = latest_checkpoint(out)
        kept = f"the last saved checkpoint, {ckpt.name}, is intact" if ckpt else "no checkpoint was saved yet"
        from rolecall.train.stop import resume_command

        console.print(f"stopped at once; {kept}. Continue with: {resume_command(out)}",
                      highlight=False, soft_wrap=True, markup=False)
        raise typer.Exit(130) from None
    if rank == 0:
        console.print(f"run directory: {path}")


@app.command("eval")
def eval_cmd(
    target: str = typer.Argument(..., help="A run directory (uses its latest checkpoint) or a config YAML."),
    overrides: list[str] = typer.Argument(None, help="dotted.key=value overrides"),
    base: bool = typer.Option(False, "--base", help="Evaluate the base model (adapters disabled)."),
) -> None:
    """Validation accuracy of the workflow's final answer, printed as JSON."""
    from rolecall.api import evaluate

    p = Path(target)
    if p.is_dir() and not (p / "config.yaml").is_file():
        _fail(f"{target!r} is a directory but not a run directory (no config.yaml)")
    with _as_user_errors():  # ConfigError, a damaged or missing checkpoint, a verifier that cannot start
        result = evaluate(p if p.is_dir() else target, base=base, overrides=list(overrides or []))
    sys.stdout.write(json.dumps(json_safe(result), indent=2) + "\n")


def json_safe(metrics: dict) -> dict:
    """NaN and infinities (a rate with nothing to count, e.g. abstention precision with no
    abstention) as null: `NaN` is not JSON, and jq or a strict parser would reject the output."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in metrics.items()}


@app.command("make-base")
def make_base_cmd(
    out: Path = typer.Option(None, "--out", help="Where to write the model (default: the package's embedded dir)."),
    fact_steps: int = typer.Option(1500, help="Phase-1 steps on packed facts (sums, copies, verdicts)."),
    episodes: int = typer.Option(1000, help="Oracle episodes per workflow in phase 2."),
    seed: int = typer.Option(0, help="Seed of data and weights."),
    lr: float = typer.Option(3e-3, min=0.0, help="Peak learning rate of the warmup+cosine schedule."),
    search_episodes: int = typer.Option(0, min=0, help="Oracle episodes of search_answer, each on a small multi-hop "
                                        "world of its own (0: none, as the shipped model was built)."),
    copy_steps: int = typer.Option(0, min=0, help="Steps of copying names off the page before phase 1 (0: none, "
                                   "as the shipped model was built)."),
    shift_facts: bool = typer.Option(False, "--shift-facts", help="Put every name fact after one to three unrelated "
                                     "passages, so the name is found by reading, not by where it sits."),
    search_only: bool = typer.Option(False, "--search-only", help="A base for search_answer alone: the copy phase, "
                                     "then search transcripts and name facts; no arithmetic facts, no other "
                                     "workflow's turns (--fact-steps and --episodes are ignored)."),
    search_rate: Optional[float] = typer.Option(None, min=0.0, max=1.0, help="How often the search oracle's "
                                                "searcher and generator play right (default: 0.6, the oracle's "
                                                "rate for solving)."),
    unseen_search_errors: float = typer.Option(0.0, min=0.0, max=1.0, help="Share of searcher turns played wrong "
                                               "and not kept as examples: the generator sees the evidence fall "
                                               "short and learns to abstain; the searcher learns right plays only."),
    init_from: Optional[Path] = typer.Option(None, "--init-from", help="Continue from a model make-base built "
                                             "(a second stage with its own schedule) instead of fresh weights."),
) -> None:
    """Build and pretrain the embedded base model (tiny Qwen3 + character tokenizer)."""
    import torch
    from rich.progress import Progress

    from rolecall.basemodel.make import make_base
    from rolecall.policies.model import embedded_dir

    torch.set_num_threads(os.cpu_count() or 1)
    if search_only and not search_episodes:
        raise typer.BadParameter("--search-only needs --search-episodes above 0: there would be nothing to learn")
    if search_only and out is None:  # it cannot play the other workflows: never the embedded default by accident
        raise typer.BadParameter("--search-only builds a base for search_answer alone; give it its own --out")
    out = out or embedded_dir()
    with _as_user_errors():  # an unwritable --out fails now, not after the pretraining
        out.mkdir(parents=True, exist_ok=True)
    with Progress(console=console) as progress, _as_user_errors():
        task = progress.add_task("pretraining", total=None)

        logged = not console.is_terminal  # piped to a log, the bar draws nothing until the end

        def prog(step: int, total: int, loss: float) -> None:
            progress.update(task, completed=step, total=total, description=f"pretraining loss {loss:.3f}")
            if logged and (step % max(1, total // 20) == 0 or step == total):  # a line per 5 % shows it moving
                progress.console.print(f"pretraining step {step}/{total} loss {loss:.3f}", highlight=False)

        rest = dict(fact_steps=0, episodes_per_workflow=0, role_functions=0, n_chat_facts=0) if search_only else \
            dict(fact_steps=fact_steps, episodes_per_workflow=episodes)
        info = make_base(out, seed=seed, search_episodes=search_episodes, n_copy_steps=copy_steps,
                         shift_facts=shift_facts, search_rate=search_rate,
                         unseen_search_errors=unseen_search_errors, init_from=init_from, lr=lr, progress=prog,
                         **rest)
    console.print(json.dumps(info))
    console.print(f"wrote {out}")


@app.command()
def export(
    run_dir: Path = typer.Argument(..., help="A run directory."),
    out: Optional[Path] = typer.Option(None, "--out", help="Where to write (default <run>/export/step_N)."),
    step: Optional[int] = typer.Option(None, "--step", help="The checkpoint's step (default: the latest complete one)."),
    merge: bool = typer.Option(False, "--merge", help="Write full models with each adapter merged into the base."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing export."),
) -> None:
    """Each policy's trained adapter (or merged model) with tokenizer, chat template and model card."""
    from rolecall.export import export_run

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with _as_user_errors():
        written = export_run(run_dir, out, step=step, merge=merge, overwrite=force)
    for path in written:
        console.print(f"wrote {path}", highlight=False, soft_wrap=True)


@app.command()
def generate(
    run_dir: Path = typer.Argument(..., help="A run directory."),
    role: str = typer.Option(..., "--role", help="The role to play, e.g. generator."),
    prompt: str = typer.Option(..., "--prompt", help="The user message ('-' reads stdin)."),
    step: Optional[int] = typer.Option(None, "--step", help="The checkpoint's step (default: the latest complete one)."),
    temperature: float = typer.Option(0.0, "--temperature", help="0 = greedy."),
    max_new_tokens: Optional[int] = typer.Option(None, "--max-new-tokens", help="Default: the run's budget for the role."),
) -> None:
    """One role's reply to a prompt with the run's trained weights, printed to stdout."""
    from rolecall.api import generate as run_generate

    text = sys.stdin.read() if prompt == "-" else prompt
    with _as_user_errors():
        reply = run_generate(run_dir, role, text, step=step, temperature=temperature, max_new_tokens=max_new_tokens)
    sys.stdout.write(reply + "\n")


@app.command()
def env(as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """What this machine gives rolecall: torch, CUDA devices, vLLM, Ray, sinks, the sandbox's isolation."""
    from rolecall.environment import facts

    found = facts()
    if as_json:
        sys.stdout.write(json.dumps(found, indent=1) + "\n")
        return
    for key, value in found.items():
        if isinstance(value, dict):
            for sub, text in value.items():
                print(f"{key + ' ' + sub:<22} {text}")
        else:
            print(f"{key:<22} {value}")


@app.command()
def configs(
    names: list[str] = typer.Argument(None, help="Configs to copy (e.g. examples/voting); none = all."),
    copy: Optional[Path] = typer.Option(None, "--copy", help="Copy the named configs (or all) into this folder, keeping their subfolders."),
    force: bool = typer.Option(False, "--force", help="With --copy: overwrite files that exist."),
) -> None:
    """List the configs installed with rolecall, or copy them to edit.

    Any command that takes a config also takes a shipped one by name: `rolecall train examples/voting`."""
    from rolecall.shipped import copy_configs, describe, shipped_configs

    if copy is None:
        if names:
            _fail("name configs only with --copy DIR; `rolecall configs` alone lists them")
        out = Console(soft_wrap=True)
        for name, path in shipped_configs().items():
            out.print(f"{name:<40} {describe(path)}", highlight=False, markup=False)
        return
    with _as_user_errors():
        written = copy_configs(list(names or []), copy, overwrite=force)
    for path in written:
        console.print(f"wrote {path}", highlight=False, soft_wrap=True)


@app.command()
def report(
    run_dirs: list[Path] = typer.Argument(..., help="One or more run directories (overlaid)."),
    control: Optional[Path] = typer.Option(None, "--control", help="A single-agent RL run drawn as a reference."),
    out: Optional[Path] = typer.Option(None, "--out", help="HTML file to write (default <first run>/report.html)."),
    title: Optional[str] = typer.Option(None, "--title", help="Page title."),
) -> None:
    """Write one self-contained HTML report: accuracy, per-role diagnostics, lengths, alarms."""
    from rolecall.report import write_report

    target = out or run_dirs[0] / "report.html"
    with _as_user_errors():  # ReportError, an unwritable --out
        path = write_report(list(run_dirs), target, control=control, title=title)
    console.print(f"wrote {path}", highlight=False, soft_wrap=True)


@app.command()
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

    from rolecall.diagnostics.inspect import load_view, parse_steps

    with _as_user_errors():
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


# The grid and verify command groups live in their own modules and register on `app`.
from rolecall import cli_grid, cli_verify  # noqa: E402,F401


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # python -m rolecall.cli
    app()
