"""An adapter's files: the bytes PEFT would write for one LoRA adapter, written durably, and read back.

Checkpoints, exports and the vLLM engine (which loads adapters from disk) all go through here.
"""
from __future__ import annotations

import json
from pathlib import Path

from rolecall.fsio import fsync_dir, write_durable


def adapter_files(model, name: str) -> dict[str, bytes]:
    from peft import get_peft_model_state_dict
    from safetensors.torch import save

    state = {k: v.detach().cpu().contiguous() for k, v in get_peft_model_state_dict(model, adapter_name=name).items()}
    # What peft's PeftConfig.save_pretrained writes, as bytes we can write durably.
    config = {k: sorted(v) if isinstance(v, set) else v for k, v in model.peft_config[name].to_dict().items()}
    return {"adapter_model.safetensors": save(state),
            "adapter_config.json": json.dumps(config, indent=2, sort_keys=True).encode()}


def model_of(model, name: str):
    """`model`, or for a run whose policies sit on several bases ({adapter: model}), that adapter's."""
    return model[name] if isinstance(model, dict) else model


def save_adapter(model, name: str, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for fname, data in adapter_files(model, name).items():
        write_durable(out / fname, data)
    fsync_dir(out)


def load_adapter(model, name: str, src: Path) -> None:
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    f = src / "adapter_model.safetensors"
    if not f.is_file():
        raise FileNotFoundError(f"checkpoint {str(src)!r} has no adapter for policy {name!r}")
    result = set_peft_model_state_dict(model, load_file(str(f)), adapter_name=name)
    unexpected = getattr(result, "unexpected_keys", [])
    if unexpected:
        raise ValueError(f"adapter {name!r} in {str(src)!r} does not fit this model: {unexpected[:3]} ...")
