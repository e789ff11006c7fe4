"""The `rolecall` app: its --version option and its commands, in the order `rolecall --help` lists them."""
from __future__ import annotations

import typer

from rolecall.cli.compare import compare_app
from rolecall.cli.grid import grid_app
from rolecall.cli.runs import eval_cmd, export, generate, inspect, report
from rolecall.cli.tools import configs, cut_model_cmd, env, get_model_cmd, make_base_cmd
from rolecall.cli.train import train
from rolecall.cli.verify import verify_app
from rolecall.cli.warm_start import warm_start_cmd

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Train multi-agent LLM workflows with reinforcement learning, role by role.")


def _print_version(value: bool) -> None:
    if value:
        from rolecall import __version__

        print(f"rolecall {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                       help="Print rolecall's version and exit."),
          debug: bool = typer.Option(False, "--debug", help="Show the full Python traceback of an error instead of "
                                     "the one-line message, e.g. to debug your own workflow module "
                                     "(the same as ROLECALL_TRACEBACK=1).")) -> None:
    """Train multi-agent LLM workflows with reinforcement learning, role by role."""
    if debug:
        import os

        os.environ["ROLECALL_TRACEBACK"] = "1"


app.command()(train)
app.command("warm-start")(warm_start_cmd)
app.command("eval")(eval_cmd)
app.command("make-base")(make_base_cmd)
app.command("get-model")(get_model_cmd)
app.command("cut-model")(cut_model_cmd)
app.command()(export)
app.command()(generate)
app.command()(env)
app.command()(configs)
app.command()(report)
app.command()(inspect)
app.add_typer(grid_app, name="grid")
app.add_typer(compare_app, name="compare")
app.add_typer(verify_app, name="verify")


def main() -> None:  # pragma: no cover
    app()
