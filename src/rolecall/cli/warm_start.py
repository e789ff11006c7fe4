"""`rolecall warm-start`: fit policies to their workflow's demonstrations before RL (rolecall.train.warm_start)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from rolecall.cli.common import as_user_errors, check_number, console, load_config_or_fail, split_config_args


def warm_start_cmd(
    config: Optional[str] = typer.Argument(None, help="YAML config of the run to warm-start (its model, task, "
                                           "workflow, routing and LoRA shape)."),
    overrides: list[str] = typer.Argument(None, help="dotted.key=value overrides; give the demonstrations other data "
                                           "than the run validates on, e.g. task.seed=7"),
    out: Path = typer.Option(..., "--out", help="New or empty folder: one adapter folder per policy, and "
                             "warm_start.json."),
    epochs: float = typer.Option(1.0, "--epochs", help="Passes over each policy's demonstrations."),
    batch: int = typer.Option(8, "--batch", help="Demonstrations per step."),
    lr: float = typer.Option(1e-3, "--lr", help="AdamW learning rate (constant)."),
    held_out: float = typer.Option(0.1, "--held-out", help="Share of the demonstrations kept aside and read "
                                   "before and after."),
    seed: int = typer.Option(0, "--seed", help="Seed of the held-out split, the batches and the sampling."),
) -> None:
    """Fit each policy's LoRA to turns its roles played right (the workflow's demonstrations, written from the task's gold data) by maximum likelihood; then start a run from it: `policies: {generator: {init_from: OUT/generator}}`.

    For a model that lacks the skill a reward presumes (SmolLM2-135M, shown the passage that answers, rarely names the answer), so RL has something to climb. Workflows that write demonstrations: search_answer (its searcher querying each support passage's title, its generator answering from sufficient evidence).

    The adapters are fitted from the base model: the config's `init_from` entries (where its runs start, often this warm start's output) are ignored."""
    check_number("--epochs", epochs, above=0)
    check_number("--batch", batch, at_least=1)
    check_number("--lr", lr, above=0)
    check_number("--held-out", held_out, at_least=0, at_most=0.5)
    path, overrides = split_config_args(config, overrides or [])
    cfg = load_config_or_fail(path, overrides)  # its policies' init_from are dropped: see from_base
    from rich.progress import Progress

    from rolecall.machine import facts
    from rolecall.train.stack import build_stack
    from rolecall.train.warm_start import check_out, from_base, warm_start, write

    with as_user_errors():
        check_out(out)

    with as_user_errors():
        stack = build_stack(from_base(cfg))
        try:
            with Progress(console=console) as progress:
                bar = progress.add_task("warm start", total=None)
                logged = not console.is_terminal  # piped to a log, the bar draws nothing until the end

                def say(policy: str, step: int, total: int, nll: float) -> None:
                    progress.update(bar, completed=step, total=total, description=f"warm start {policy}: nll {nll:.3f}")
                    if logged and (step % max(1, total // 10) == 0 or step == total):
                        progress.console.print(f"{policy} step {step}/{total} nll {nll:.3f}", highlight=False)

                record = warm_start(stack, epochs=epochs, batch=batch, lr=lr, held_out=held_out, seed=seed,
                                    progress=say)
            machine = {k: v for k, v in facts().items() if k in ("rolecall", "platform", "torch", "transformers",
                                                                  "peft")}
            record = write(stack, record, out, {"config": str(path) if path else "embedded default",
                                                "overrides": list(overrides), "machine": machine})
        finally:
            stack.close()
    for policy, r in record["policies"].items():
        b, a = r["held_out_before"], r["held_out_after"]
        console.print(f"{policy}: {r['train']} demonstrations; held out ({b['demonstrations']}): exact "
                      f"{b.get('exact', float('nan')):.2f} -> {a.get('exact', float('nan')):.2f}, contains "
                      f"{b.get('contains', float('nan')):.2f} -> {a.get('contains', float('nan')):.2f}\n"
                      f"  start a run from it: policies.{policy}.init_from={out / policy}",
                      highlight=False, soft_wrap=True, markup=False)
    console.print(f"wrote {out}", highlight=False, markup=False)
