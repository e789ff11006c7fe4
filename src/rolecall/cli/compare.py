"""`rolecall compare`: does training this workflow beat training one model alone, and why (`compare_app`)."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

import typer
from typer.core import TyperGroup

from rolecall.cli.common import as_user_errors, console


class _CompareGroup(TyperGroup):
    """`rolecall compare CONFIG ...` is `rolecall compare run CONFIG ...`."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = ["run", *args]
        return super().parse_args(ctx, args)


compare_app = typer.Typer(cls=_CompareGroup, no_args_is_help=True,
                          help="Compare a trained workflow with the single-agent control, the generator transfer "
                               "and its untrained self, with intervals and detectable effects "
                               "(`rolecall compare CONFIG`); `rolecall compare report DIR`; "
                               "`rolecall compare screen SCREEN.yaml`.")


@compare_app.command("run")
def compare_run(
    args: list[str] = typer.Argument(..., help="Multi-agent configs (paths or shipped names such as examples/voting), "
                                     "then dotted.key=value overrides for every arm."),
    out: Optional[Path] = typer.Option(None, "--out", help="Comparison directory (default runs/compare-<config name>)."),
    resume: bool = typer.Option(False, "--resume", help="Continue the comparison in --out: finished units are kept."),
    seeds: Optional[int] = typer.Option(None, "--seeds", help="Seeds per arm (train.seed 0..N-1; default 5)."),
    samples: Optional[int] = typer.Option(None, "--samples", help="Answers per validation problem in every "
                                          "evaluation (default 8)."),
    routing: Optional[list[str]] = typer.Option(None, "--routing", help="Train the workflow under this routing "
                                                "(isolated, shared; repeat for both). Default: the config's own."),
    target_mde: Optional[float] = typer.Option(None, "--target-mde", help="Keep adding seeds until every (a)-(c), (e) "
                                               "question's 80 %-power detectable effect is below this (or --max-seeds)."),
    max_seeds: Optional[int] = typer.Option(None, "--max-seeds", help="The cap on seeds under --target-mde (default 10)."),
    long_factor: Optional[float] = typer.Option(None, "--long-factor", help="The long control trains this far past "
                                                "the trained arms' generated tokens and training seconds (default 1.5)."),
    no_transfer: bool = typer.Option(False, "--no-transfer", help="Leave out the generator transfer arm."),
    chunk: Optional[int] = typer.Option(None, "--chunk", help="Problems per evaluation chunk (an evaluation resumes "
                                        "by chunk; default 25)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Check every arm's config and input, print the plan, run nothing."),
    record: Optional[Path] = typer.Option(None, "--record", metavar="FILE", help="Also write the record (JSON) to "
                                          "FILE, e.g. a results folder kept under version control."),
) -> None:
    """Train and evaluate every arm of the comparison, then write record.json and report.html."""
    from rolecall.compare import plan as P
    from rolecall.compare.runner import INDEX

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    configs = [a for a in args if "=" not in a or Path(a).exists()]
    overrides = [a for a in args if a not in configs]
    out = out or Path("runs") / f"compare-{Path(configs[0]).stem if configs else 'comparison'}"
    with as_user_errors():
        given = None
        if len(configs) == 1:  # a compare file (configs/compares/NAME.yaml, or `compares/NAME` installed)
            from rolecall.shipped_configs import find_shipped

            path = Path(configs[0]) if Path(configs[0]).is_file() else find_shipped(configs[0])
            given = P.compare_file(path) if path is not None else None
    fields = given or {"configs": configs}
    if given:
        fields["overrides"] = [*given.get("overrides", []), *overrides]
    else:
        fields["overrides"] = overrides
    flags = {"seeds": seeds, "samples": samples, "routings": list(routing or []) or None, "long_factor": long_factor,
             "target_mde": target_mde, "max_seeds": max_seeds, "transfer": False if no_transfer else None,
             "chunk_problems": chunk}
    fields.update({k: v for k, v in flags.items() if v is not None})  # a flag overrides the file
    opts = P.Options(**fields)
    with as_user_errors():
        opts.check()
        wfs = P.workflows(opts)
        units = P.untrained_units(wfs) + P.seed_units(opts, wfs, 0)
    if dry_run:
        _dry_run(opts, wfs, units, out)
        return
    if resume and not (out / INDEX).is_file():
        resume = False  # nothing to continue: start it
    _run(out, opts, resume, len(units) - 1 + (len(units) - len(wfs)) * (opts.seeds - 1), record)


def _dry_run(opts, wfs, units, out: Path) -> None:
    from rolecall.grid.plan import one_line
    from rolecall.train.stack import preflight

    for u in units:
        sys.stdout.write(f"{u.kind}\t{u.name}\t{u.arm}\n")
    with as_user_errors():
        cfg = next(u.config for u in units if u.config is not None)
        info = preflight(cfg)
    for line in info.pop("data_report"):
        console.print(line, highlight=False, soft_wrap=True, markup=False)
    console.print(f"dry run ok: {len(wfs)} workflow(s), {opts.seeds} seeds x {len(units) - len(wfs)} units per seed, "
                  f"{opts.samples} answers per validation problem; would write {out}. Inputs: {one_line(str(info))}",
                  highlight=False, soft_wrap=True, markup=False)


def _copy_record(source: Path, record: Path | None) -> None:
    """The record written into the comparison's (or screen's) directory, copied whole to `record`."""
    if record is not None:
        from rolecall.fsio import write_atomic

        write_atomic(record, source.read_text("utf-8"))
        console.print(f"wrote {record}", highlight=False, soft_wrap=True, markup=False)


def _run(out: Path, opts, resume: bool, n_units: int, record: Path | None = None) -> None:
    from rolecall.compare.progress import CompareProgress
    from rolecall.compare.record import write
    from rolecall.compare.runner import Comparison
    from rolecall.rundir.stop import TrainingStopped

    say = lambda text: console.print(text, highlight=False, soft_wrap=True, markup=False)  # noqa: E731
    with as_user_errors():
        cmp = Comparison.open(out, opts, resume, say)
    from rolecall.library_logs import library_output_to

    view = CompareProgress(console, out, n_units)
    try:  # library chatter (weight-loading bars, warnings) into <out>/library.log, as `train` does
        with as_user_errors(catch_interrupt=False), library_output_to(out), view:
            cmp.run(view)
    except (TrainingStopped, KeyboardInterrupt) as e:
        say(f"{e}\nstopped; finished units are kept. Continue with: rolecall compare {' '.join(opts.configs)} "
            f"--out {out} --resume (and the same options)")
        raise typer.Exit(getattr(e, "exit_code", 130)) from None
    with as_user_errors():
        paths = write(cmp, " ".join(sys.argv))
    _summary(paths[0])
    for p in paths:
        say(f"wrote {p}")
    _copy_record(paths[0], record)
    if cmp.state.failed:
        say(f"{len(cmp.state.failed)} unit(s) failed: " + "; ".join(f"{k}: {v}" for k, v in cmp.state.failed.items()))
        raise typer.Exit(1)


def _summary(record_path: Path) -> None:
    import json

    from rich.table import Table

    rec = json.loads(record_path.read_text("utf-8"))
    t = Table(title="questions (A − B)")
    for col in ("question", "A − B", "95 % (bootstrap / t)", "verdict", "mde80"):
        t.add_column(col, overflow="fold")
    for q in rec["questions"]:
        if q["kind"] == "d" and "untrained" in q["id"]:
            continue
        est = "–" if q.get("estimate") is None else f"{q['estimate']:+.3f}"
        ci = "–" if "ci95_t" not in q else (f"[{q['ci95_bootstrap'][0]:+.3f}, {q['ci95_bootstrap'][1]:+.3f}] / "
                                            f"[{q['ci95_t'][0]:+.3f}, {q['ci95_t'][1]:+.3f}]")
        t.add_row(q["question"], est, ci, q.get("verdict", ""), "–" if q.get("mde80") is None else f"{q['mde80']:.3f}")
    console.print(t)


@compare_app.command("report")
def compare_report(out: Path = typer.Argument(..., help="A comparison directory written by `rolecall compare`.")) -> None:
    """Rewrite record.json and report.html from what the directory holds (finished units only)."""
    from rolecall.compare.record import write
    from rolecall.compare.runner import Comparison

    with as_user_errors():
        cmp = Comparison.open(out, None, True, lambda text: None)
        paths = write(cmp, " ".join(sys.argv))
    _summary(paths[0])
    for p in paths:
        console.print(f"wrote {p}", highlight=False, soft_wrap=True)


@compare_app.command("screen")
def compare_screen(
    screen_file: Path = typer.Argument(..., help="A screen file: workflows, candidates and the selection rule."),
    out: Optional[Path] = typer.Option(None, "--out", help="Screen directory (default runs/screen-<file name>)."),
    resume: bool = typer.Option(False, "--resume", help="Continue the screen in --out: finished evaluations are kept."),
    record: Optional[Path] = typer.Option(None, "--record", metavar="FILE", help="Also write the record (JSON) to "
                                          "FILE, e.g. a results folder kept under version control."),
) -> None:
    """Evaluate the untrained workflows on candidate tasks and choose one by the file's rule (screen.json)."""
    from rolecall.compare.screen import load_screen, run_screen

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    out = out or Path("runs") / f"screen-{screen_file.stem}"
    say = lambda text: console.print(text, highlight=False, soft_wrap=True, markup=False)  # noqa: E731
    from rolecall.library_logs import library_output_to

    with as_user_errors():
        screen = load_screen(screen_file)
        with library_output_to(out):  # weight-loading bars and warnings into <out>/library.log
            screened = run_screen(screen, out, resume, say)
    from rich.table import Table

    t = Table(title=f"screen {screen_file}")
    for col in ("candidate", "distinct", "single-sample", "oracle", "headroom", "evaluator / always accept", "rule"):
        t.add_column(col, overflow="fold")
    fmt = lambda x: "–" if x is None else f"{x:.3f}"  # noqa: E731
    choice = screened["choice"]
    for label, row in screened["candidates"].items():
        ev = next((v for v in row.values() if isinstance(v, dict) and "evaluator_accuracy" in v), {})
        vote = next((v for v in row.values() if isinstance(v, dict) and v.get("oracle") is not None), {})
        verdict = "chosen" if label == choice["chosen"] else "passes" if label in choice["passing"] else \
            choice["excluded"].get(label, "")
        t.add_row(label, str((row.get("space") or {}).get("distinct", "–")), fmt(row.get("single_sample")),
                  fmt(vote.get("oracle")), fmt(row.get("headroom")),
                  f"{fmt(ev.get('evaluator_accuracy'))} / {fmt(ev.get('rule_always_correct_acc'))}", verdict)
    console.print(t)
    say(f"chosen: {choice['chosen']}; wrote {out / 'screen.json'}")
    _copy_record(out / "screen.json", record)
