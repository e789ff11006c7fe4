"""Meta-policy checkpoints: one self-verifying file holding weights, optimizer state and step.

Layout: a magic line, a one-line JSON header with the payload's size and SHA-256, then the
payload (`torch.save` of {"policy", "optimizer", "step", "extra"}). The file is written under
a temporary name in the same folder and renamed into place, so a crash leaves the previous
checkpoint or the whole new one; a file altered afterwards fails the checksum on load.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rolecall.fsio import write_durable

MAGIC = b"rolecall-metapolicy-checkpoint v1\n"


def save_checkpoint(path: str | os.PathLike, policy: nn.Module, optimizer: torch.optim.Optimizer, step: int,
                    extra: dict[str, Any] | None = None) -> Path:
    """Write the checkpoint atomically; `extra` must hold only plain values (str, numbers, lists, dicts)."""
    path = Path(path)
    buffer = io.BytesIO()
    torch.save({"policy": policy.state_dict(), "optimizer": optimizer.state_dict(), "step": int(step),
                "extra": dict(extra or {})}, buffer)
    payload = buffer.getvalue()
    header = json.dumps({"size": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_durable(path, MAGIC + header + b"\n" + payload)
    fd = os.open(path.parent, os.O_RDONLY)  # make the rename itself survive a power cut
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def read_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """The verified contents {"policy", "optimizer", "step", "extra"}; ValueError naming the file otherwise."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ValueError(f"meta-policy checkpoint {path} cannot be read: {e}") from e
    if not data.startswith(MAGIC):
        raise ValueError(f"{path} is not a meta-policy checkpoint (its first line is not {MAGIC!r})")
    end = data.find(b"\n", len(MAGIC))
    try:
        header = json.loads(data[len(MAGIC):end]) if end >= 0 else None
        size, digest = header["size"], header["sha256"]
    except (ValueError, TypeError, KeyError):
        raise ValueError(f"meta-policy checkpoint {path} is damaged: its header is unreadable") from None
    payload = data[end + 1:]
    if len(payload) != size:
        raise ValueError(f"meta-policy checkpoint {path} is damaged: {len(payload)} payload bytes, "
                         f"the header says {size}")
    if hashlib.sha256(payload).hexdigest() != digest:
        raise ValueError(f"meta-policy checkpoint {path} is damaged: its contents do not match their SHA-256")
    try:
        state = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
        if not {"policy", "optimizer", "step", "extra"} <= set(state):
            raise KeyError("policy/optimizer/step/extra")
    except Exception as e:  # the checksum matched, so this file was written wrong, not altered
        raise ValueError(f"meta-policy checkpoint {path} has a valid checksum but unreadable contents: {e}") from e
    return state


def load_checkpoint(path: str | os.PathLike, policy: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Restore weights and optimizer state in place from a verified checkpoint; returns its step.

    Shapes are checked before anything is copied, so a mismatch leaves `policy` untouched.
    """
    state = read_checkpoint(path)
    want = {k: tuple(v.shape) for k, v in policy.state_dict().items()}
    have = {k: tuple(v.shape) for k, v in state["policy"].items()}
    if want != have:
        diff = sorted(set(want.items()) ^ set(have.items()))[:3]
        raise ValueError(f"meta-policy checkpoint {path} does not fit this policy (differs at {diff})")
    policy.load_state_dict(state["policy"])
    optimizer.load_state_dict(state["optimizer"])
    return int(state["step"])
