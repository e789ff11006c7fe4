"""Trained policies out of a run, for use elsewhere: `rolecall export RUN [--step N | --best] [--merge]`.

For every LLM policy of the run (each adapter of its routing) it writes `<out>/<policy>/`:
- without `--merge`: the PEFT adapter (`adapter_model.safetensors`, `adapter_config.json`
  whose `base_model_name_or_path` is the base model's directory), the tokenizer with its chat
  template, and a model card (`README.md`);
- with `--merge`: a full model directory, base weights with the adapter folded in, loadable
  with `AutoModelForCausalLM.from_pretrained` alone, plus the tokenizer and the card.

Load an adapter export with plain transformers and PEFT:

    base = AutoModelForCausalLM.from_pretrained(card_base_dir)
    model = PeftModel.from_pretrained(base, "<out>/<policy>")
    tok = AutoTokenizer.from_pretrained("<out>/<policy>")

Tied embeddings: rolecall's LoRA targets linear layers only (`lora.target_modules`,
`all-linear` excludes the output head), so the input embedding and the output head it is
tied to are never changed, and a merged export keeps them tied, exactly as in the base. A
target list that names `embed_tokens` or `lm_head` on a tied model is refused here, since
merging it would change both matrices at once.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from rolecall.errors import UserError
from rolecall.rundir.checkpoint import checkpoint_of


class ExportError(UserError, ValueError):
    """The run or output folder cannot give an export."""


def _val_accuracy(run_dir: Path, step: int) -> float | None:
    from rolecall.diagnostics.metrics_log import read_metrics

    rows = read_metrics(Path(run_dir) / "metrics.jsonl")[0]
    return next((r["val/accuracy"] for r in reversed(rows) if r.get("step") == step and "val/accuracy" in r), None)


def _card(policy: str, roles: list[str], cfg, base_dir: Path, step: int, accuracy: float | None,
          merged: bool, weights: str | None) -> str:
    from rolecall.version import __version__

    acc = "not measured at this step" if accuracy is None else f"{accuracy:.3f}"
    how = ("A full model: the base weights with the LoRA adapter merged in." if merged else
           "A LoRA adapter (PEFT) on the base model named below.")
    return f"""---
library_name: {"transformers" if merged else "peft"}
base_model: {base_dir}
tags: [rolecall, multi-agent, reinforcement-learning]
---
# rolecall policy `{policy}`

{how} Trained with rolecall {__version__} by reinforcement learning as part of a
multi-agent workflow.

| | |
|---|---|
| base model | `{base_dir}`{f" (weights {weights})" if weights else ""} |
| workflow | `{cfg.workflow.name}` |
| roles it plays | {", ".join(f"`{r}`" for r in roles)} |
| training steps | {step} |
| validation accuracy of the workflow at this step | {acc} |
| estimator | `{cfg.algo.estimator}` |
| LoRA | r={cfg.lora.r}, alpha={cfg.lora.alpha}, targets `{cfg.lora.target_modules}` |

The prompts the roles were trained with are the workflow's (`workflow.prompts`, here
`{cfg.workflow.prompts or "the workflow's default set"}`); the tokenizer and chat template
in this folder are the ones training used.
"""


def export_run(run_dir: str | Path, out: str | Path | None = None, *, step: int | None = None,
               merge: bool = False, overwrite: bool = False, best: bool = False, skip_damaged: bool = False,
               notify=None) -> list[Path]:
    """Write every LLM policy of the run under `out` (default `<run>/export/step_N`); returns the folders.
    The checkpoint is `step`'s, the best validated one with `best` (`checkpoints/best.json`), else the
    latest (refused when damaged, unless `skip_damaged`: then the newest sound one, said via `notify`)."""
    from rolecall.api import read_run
    from rolecall.compose.bases import policy_paths
    from rolecall.compose.parts import build_parts
    from rolecall.policies.model import load_model, load_tokenizer, resolve_model_dir
    from rolecall.policies.routing import BASE_POLICY

    run = read_run(run_dir)
    cfg = run.config
    ckpt = checkpoint_of(run.path, step, best=best, skip_damaged=skip_damaged, notify=notify)
    step = int(ckpt.name.removeprefix("step_"))
    routing = build_parts(cfg).routing
    if not routing.adapters:
        raise ExportError(f"{str(run.path)!r} trains no LLM adapter; nothing to export")
    out = Path(out) if out is not None else run.path / "export" / f"step_{step}"
    targets = {p: out / p for p in routing.adapters}
    clash = [str(t) for t in targets.values() if t.exists() and any(t.iterdir())]
    if clash and not overwrite:
        raise ExportError(f"{clash[0]} exists and is not empty; pass --force to overwrite")
    paths = policy_paths(cfg, routing)
    try:
        fp_model = json.loads((run.path / "fingerprint.json").read_text())["model"]
    except (OSError, ValueError, KeyError):
        fp_model = {}
    accuracy = _val_accuracy(run.path, step)
    written = []
    for policy, dest in targets.items():
        path = paths[policy]
        base_dir = resolve_model_dir(path)
        tok = load_tokenizer(path, cfg.model.chat_template if path == cfg.model.path else None)
        weights = (fp_model.get("policy_bases", {}).get(policy) or fp_model).get("weights")
        if merge and _tied(base_dir) and _targets_embeddings(cfg.lora.target_modules):
            raise ExportError(f"lora.target_modules {cfg.lora.target_modules!r} includes the embedding or output head "
                              "of a model whose embeddings are tied; merging would change both; export the adapter instead")
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        roles = [r for r, p in routing.routes.items() if p == policy]
        if merge:
            from peft import PeftModel

            base = load_model(path, "float32", "cpu")
            merged = PeftModel.from_pretrained(base, str(ckpt / policy)).merge_and_unload()
            merged.save_pretrained(dest, safe_serialization=True)
            del merged, base
        else:
            for name in ("adapter_model.safetensors", "adapter_config.json"):
                shutil.copyfile(ckpt / policy / name, dest / name)
            config = json.loads((dest / "adapter_config.json").read_text())
            config["base_model_name_or_path"] = str(base_dir)
            (dest / "adapter_config.json").write_text(json.dumps(config, indent=2))
        tok.save_pretrained(dest)
        (dest / "README.md").write_text(_card(policy, roles, cfg, base_dir, step, accuracy, merge, weights))
        written.append(dest)
    unused = [r for r, p in routing.routes.items() if p == BASE_POLICY]
    if unused:
        (out / "BASE_ROLES.txt").write_text("These roles ran on the bare base model (no adapter): "
                                            + ", ".join(unused) + f"\nbase: {resolve_model_dir(cfg.model.path)}\n")
    return written


def _tied(base_dir: Path) -> bool:
    try:
        return bool(json.loads((base_dir / "config.json").read_text()).get("tie_word_embeddings", False))
    except (OSError, ValueError):
        return False


def _targets_embeddings(targets) -> bool:
    names = [targets] if isinstance(targets, str) else list(targets)
    return any(n in ("embed_tokens", "lm_head") or n.endswith((".embed_tokens", ".lm_head")) for n in names)
