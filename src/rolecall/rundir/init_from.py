"""Policies that start from an adapter trained elsewhere (`policies: {name: {init_from: PATH}}`).

PATH is a PEFT adapter directory (`adapter_config.json` + `adapter_model.safetensors`: an
export, a checkpoint's `checkpoints/step_N/<policy>/`, a warm start's `DIR/<policy>/`, any
PEFT adapter), or an earlier rolecall run directory, whose newest complete checkpoint gives the adapter: the only one it
holds, else the one named like the policy. The adapter must have the run's LoRA shape
(`lora.r`, `lora.alpha`, `lora.target_modules`) and fit the run's base model; when it comes
from a rolecall run or warm start, its base weights must be this run's (compared by fingerprint).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from rolecall.errors import UserError
from rolecall.rundir.checkpoint import latest_checkpoint

WARM_START_RECORD = "warm_start.json"  # what `rolecall warm-start` writes beside its adapter folders


class InitFromError(UserError, ValueError):
    """An `init_from` adapter that cannot start the policy; the message names the policy."""


def resolve_adapter(policy: str, path: str | Path) -> Path:
    """The adapter directory `init_from` names (InitFromError naming the policy if none)."""

    p = Path(path).expanduser()
    if (p / "adapter_config.json").is_file():
        return p
    if (p / "config.yaml").is_file():  # a run directory
        ckpt = latest_checkpoint(p)
        if ckpt is None:
            raise InitFromError(f"policies.{policy}.init_from: run {str(p)!r} has no complete checkpoint")
        adapters = sorted(d.name for d in ckpt.iterdir() if (d / "adapter_config.json").is_file())
        if len(adapters) == 1:
            return ckpt / adapters[0]
        if policy in adapters:
            return ckpt / policy
        raise InitFromError(f"policies.{policy}.init_from: run {str(p)!r} holds adapters {adapters} and none is "
                            f"named {policy!r}; name one: {str(ckpt)}/<adapter>")
    raise InitFromError(f"policies.{policy}.init_from: {str(p)!r} is neither a PEFT adapter directory "
                        "(adapter_config.json) nor a rolecall run directory (config.yaml)")


def _source_run(adapter: Path) -> Path | None:
    """The rolecall run an adapter directory sits in (…/checkpoints/step_N/<policy>), if any."""
    for parent in list(adapter.resolve().parents)[:3]:
        if (parent / "config.yaml").is_file() and (parent / "checkpoints").is_dir():
            return parent
    return None


def _source_model(adapter: Path) -> dict | None:
    """The base model fingerprint of the run or warm start (`rolecall warm-start`: DIR/<policy>/
    beside DIR/warm_start.json) the adapter comes from; None when it names none."""
    source = _source_run(adapter)
    try:
        if source is not None:
            return json.loads((source / "fingerprint.json").read_text())["model"]
        record = adapter.resolve().parent / WARM_START_RECORD
        return json.loads(record.read_text())["model"] if record.is_file() else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def check_adapter(policy: str, adapter: Path, lora, model_fingerprint: dict | None) -> None:
    """The adapter has the run's LoRA shape and, if it comes from a rolecall run, the same base weights."""
    try:
        config = json.loads((adapter / "adapter_config.json").read_text())
    except (OSError, ValueError) as e:
        raise InitFromError(f"policies.{policy}.init_from: {adapter}/adapter_config.json cannot be read: {e}") from None
    want = {"r": lora.r, "lora_alpha": lora.alpha}
    have = {k: config.get(k) for k in want}
    if have != want:
        raise InitFromError(f"policies.{policy}.init_from: the adapter in {str(adapter)!r} has LoRA {have}, this run "
                            f"uses {want} (set lora.r and lora.alpha to match)")
    theirs = _source_model(adapter) if model_fingerprint is not None else None
    if theirs is not None and theirs.get("weights") != model_fingerprint.get("weights"):
        where = _source_run(adapter) or adapter.resolve().parent
        raise InitFromError(f"policies.{policy}.init_from: the adapter was trained on another base model "
                            f"({str(where)!r}: weights {theirs.get('weights')}, this run: "
                            f"{model_fingerprint.get('weights')})")


def load_init(model, policy: str, adapter: Path) -> None:
    """Load the adapter's weights into `policy`'s adapter; every one of its LoRA tensors must be covered."""
    from peft import get_peft_model_state_dict, set_peft_model_state_dict
    from safetensors.torch import load_file

    try:
        state = load_file(str(adapter / "adapter_model.safetensors"))
        result = set_peft_model_state_dict(model, state, adapter_name=policy)
    except Exception as e:  # noqa: BLE001 - a size mismatch (another base), an unreadable file
        raise InitFromError(f"policies.{policy}.init_from: the adapter in {str(adapter)!r} does not fit this "
                            f"base model: {str(e).splitlines()[0][:300]}") from None
    unexpected = getattr(result, "unexpected_keys", [])
    ours = set(get_peft_model_state_dict(model, adapter_name=policy))
    missing = sorted(ours - set(state))
    if unexpected or missing:
        raise InitFromError(f"policies.{policy}.init_from: the adapter in {str(adapter)!r} does not cover this run's "
                            f"LoRA layers (lora.target_modules): missing {missing[:2]}, unexpected {unexpected[:2]}")


def adapter_digest(adapter: Path) -> str:
    """SHA-256 (16 hex) of the adapter's weights file: what the run's fingerprint records."""
    h = hashlib.sha256()
    with open(adapter / "adapter_model.safetensors", "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]
