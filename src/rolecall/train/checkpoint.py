"""Checkpoints: per-policy PEFT adapters + optimizer/scheduler/RNG/step, written atomically.

Layout: `checkpoints/step_N/<policy>/{adapter_model.safetensors, adapter_config.json}`
and `checkpoints/step_N/trainer_state.pt`. A step directory is built under a temporary
name and renamed into place, then the `latest` marker is replaced: a crash mid-save
leaves the previous checkpoint and marker untouched.
"""
from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import torch

_TMP = ".tmp-"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + _TMP + str(os.getpid()))
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def save_adapter(model, name: str, out: Path) -> None:
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in get_peft_model_state_dict(model, adapter_name=name).items()}
    save_file(state, str(out / "adapter_model.safetensors"))
    model.peft_config[name].save_pretrained(str(out))


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


def save_checkpoint(run_dir: Path, step: int, model, optims: dict, adapters: tuple[str, ...], keep_last: int) -> Path:
    root = run_dir / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step}"
    tmp = root / f"{_TMP}step_{step}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    for name in adapters:
        save_adapter(model, name, tmp / name)
    state = {
        "step": step,
        "optim": {k: {"optimizer": o.optimizer.state_dict(), "scheduler": o.scheduler.state_dict()} for k, o in optims.items()},
        "rng": {"torch": torch.get_rng_state(), "python": random.getstate()},
    }
    torch.save(state, tmp / "trainer_state.pt")
    for f in tmp.rglob("*"):
        if f.is_file():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    _fsync_dir(root)
    _write_atomic(root / "latest", f"step_{step}\n".encode())
    _retain(root, keep_last)
    return final


def _retain(root: Path, keep_last: int) -> None:
    steps = sorted((int(p.name.split("_")[1]), p) for p in root.glob("step_*") if p.is_dir())
    for _, p in steps[:-keep_last]:
        shutil.rmtree(p, ignore_errors=True)
    for p in root.glob(f"{_TMP}*"):  # leftovers of a crashed save
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)


def latest_checkpoint(run_dir: Path) -> Path | None:
    marker = run_dir / "checkpoints" / "latest"
    if not marker.is_file():
        return None
    path = run_dir / "checkpoints" / marker.read_text().strip()
    return path if (path / "trainer_state.pt").is_file() else None


def load_checkpoint(ckpt: Path, model, optims: dict, adapters: tuple[str, ...]) -> int:
    for name in adapters:
        load_adapter(model, name, ckpt / name)
    state = torch.load(ckpt / "trainer_state.pt", weights_only=False)
    for k, o in optims.items():
        o.optimizer.load_state_dict(state["optim"][k]["optimizer"])
        o.scheduler.load_state_dict(state["optim"][k]["scheduler"])
    torch.set_rng_state(state["rng"]["torch"])
    random.setstate(state["rng"]["python"])
    return int(state["step"])
