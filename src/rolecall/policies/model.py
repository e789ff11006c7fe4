"""Load a base causal LM (embedded or any local HF directory) and attach named LoRA adapters."""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import torch

from rolecall.policies.routing import BASE_POLICY

EMBEDDED = "embedded"
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def embedded_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "basemodel" / "embedded"


def resolve_model_dir(path: str) -> Path:
    """`embedded` or a local directory; a clear error instead of a hub download attempt."""
    p = embedded_dir() if path == EMBEDDED else Path(path).expanduser()
    if not (p / "config.json").is_file():
        hint = " (run `rolecall make-base` to build the embedded model)" if path == EMBEDDED else ""
        raise FileNotFoundError(f"model.path: {str(p)!r} is not a model directory with a config.json{hint}")
    return p


def load_base(path: str, dtype: str = "float32"):
    """(model, tokenizer) from a local directory only: never reaches for a hub."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    d = resolve_model_dir(path)
    tok = AutoTokenizer.from_pretrained(d, local_files_only=True)
    tok.padding_side = "left"
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(d, dtype=_DTYPES[dtype], local_files_only=True)
    return model, tok


def attach_adapters(model, names: list[str], *, r: int, alpha: int, dropout: float,
                    target_modules: str | list[str]):
    """One LoRA adapter per policy name on one shared base (PeftModel)."""
    from peft import LoraConfig, get_peft_model

    if not names:
        raise ValueError("routing: at least one role must be routed to a trainable adapter")
    cfg = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=target_modules,
                     task_type="CAUSAL_LM")
    peft_model = get_peft_model(model, cfg, adapter_name=names[0])
    for name in names[1:]:
        peft_model.add_adapter(name, cfg)
    return peft_model


def adapter_params(model, name: str) -> dict[str, torch.nn.Parameter]:
    """The LoRA parameters that belong to one adapter, by full name."""
    return {n: p for n, p in model.named_parameters() if f".{name}." in n and "lora_" in n}


@contextmanager
def active_policy(model, name: str) -> Iterator[None]:
    """Run the model as one policy: its adapter alone, or the bare base for `base`."""
    if name == BASE_POLICY:
        with model.disable_adapter():
            yield
        return
    model.set_adapter(name)
    yield


def peft_row_names(policies: list[str]) -> list[str]:
    # PEFT's per-row adapter list spells "no adapter" as "__base__".
    return ["__base__" if p == BASE_POLICY else p for p in policies]
