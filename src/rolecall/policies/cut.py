"""A smaller base from a bigger one: its first N transformer layers, with its embeddings, final
norm, head and tokenizer (`rolecall cut-model`).

Dropping a decoder's later layers is the plainest way to get a cheaper model of the same family
and vocabulary: a second base for a heterogeneous team (one role on the cut model, the others
on the whole one) that loads, tokenizes and chats like the first. It is not a distillation: the
cut model's outputs are those of an unfinished forward pass, and it learns (or fails to) from
there.
"""
from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from rolecall.errors import UserError
from rolecall.policies.model import load_model, load_tokenizer, resolve_model_dir

RECORD = "rolecall_cut.json"  # what was cut from what; also marks a folder cut-model may write over


def cut_model(source: str, layers: int, out: Path) -> dict:
    """Write `source`'s first `layers` decoder layers as a model directory at `out`; returns
    what was kept. `source` is anything `model.path` takes (`embedded`, a named real model, a
    `.gguf` file, a checkpoint directory)."""
    _check_out(out)
    model = load_model(source, "float32", "cpu", what="cut-model SOURCE")
    tok = load_tokenizer(source)
    stack = getattr(getattr(model, "model", None), "layers", None)
    full = model.config.num_hidden_layers
    if stack is None or len(stack) != full:
        raise UserError(f"cut-model: {source!r} keeps its layers somewhere other than `model.layers` (a "
                        f"{type(model).__name__}); it cuts Llama-, Qwen- and Mistral-style decoders")
    if not 1 <= layers < full:
        raise UserError(f"cut-model: --layers must be from 1 to {full - 1} ({source!r} has {full} layers)")
    model.model.layers = stack[:layers]
    model.config.num_hidden_layers = layers
    if getattr(model.config, "layer_types", None):  # per-layer attention kinds (sliding or full), cut alike
        model.config.layer_types = model.config.layer_types[:layers]
    kept = {"source": source, "source_dir": str(resolve_model_dir(source)), "layers": f"{layers} of {full}",
            "params": sum(p.numel() for p in model.parameters())}
    # Written beside `out` and moved in whole: a cut stopped midway (Ctrl-C) leaves no half model there.
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        model.save_pretrained(partial)
        tok.save_pretrained(partial)
        (partial / RECORD).write_text(json.dumps(kept, indent=1) + "\n")
        if out.exists():  # empty, or a model cut-model wrote (checked above)
            shutil.rmtree(out)
        partial.rename(out)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return kept


def _check_out(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {str(out)!r} is a file; a model is a directory")
    if out.is_dir() and any(out.iterdir()) and not (out / RECORD).is_file():
        raise UserError(f"--out {str(out)!r} is not empty and holds no model cut-model wrote; nothing was written. "
                        "Choose an empty or new directory")
