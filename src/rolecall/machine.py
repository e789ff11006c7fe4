"""What this machine gives rolecall: `rolecall env` prints it, so a user can tell why a path is off.

Each line is one fact, found without loading a model: Python and rolecall, torch and its
threads, CUDA and each device, the optional engines and sinks (vLLM, Ray, TensorBoard, W&B),
the code sandbox's isolation, and the embedded model.
"""
from __future__ import annotations

import importlib.metadata
import os
import platform
import sys


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def facts() -> dict[str, object]:
    """Everything `rolecall env` reports, as plain data (JSON-ready)."""
    import torch

    from rolecall import __version__

    out: dict[str, object] = {
        "rolecall": __version__,
        "python": f"{platform.python_version()} ({sys.executable})",
        "platform": f"{platform.system()} {platform.release()} {platform.machine()}, {os.cpu_count()} cores",
        "torch": f"{torch.__version__} (threads {torch.get_num_threads()}, "
                 f"built with CUDA {torch.version.cuda or 'no'})",
        "transformers": _version("transformers"), "peft": _version("peft"),
    }
    if torch.cuda.is_available():
        out["cuda"] = {f"cuda:{i}": f"{torch.cuda.get_device_name(i)}, "
                                    f"{torch.cuda.get_device_properties(i).total_memory / 2**30:.1f} GiB, "
                                    f"bf16 {'yes' if torch.cuda.is_bf16_supported() else 'no'}"
                       for i in range(torch.cuda.device_count())}
    else:
        out["cuda"] = "no CUDA device (model.device=auto runs on the CPU)"
    for name, dist, hint in (("vllm", "vllm", "pip install vllm (GPU)"), ("ray", "ray", "pip install 'rolecall[ray]'"),
                             ("tensorboard", "tensorboard", "pip install 'rolecall[tensorboard]'"),
                             ("wandb", "wandb", "pip install 'rolecall[wandb]'"),
                             ("pyarrow", "pyarrow", "pip install 'rolecall[data]' (parquet datasets)")):
        version = _version(dist)
        out[name] = version if version else f"not installed ({hint})"
    out["code sandbox"] = _sandbox()
    out["embedded model"] = _embedded()
    return out


def _sandbox() -> str:
    from rolecall.rewards.code import CodeSandbox, SandboxUnavailable

    try:
        iso = CodeSandbox(allow_unisolated_network=True).isolation
    except SandboxUnavailable as e:
        return f"unavailable: {e}"
    line = f"{iso['strategy']}: network {iso['network']}, pid {iso['pid']}"
    if iso["network"] != "netns":
        line += " (code rewards refuse to run without reward.allow_unisolated_code=true)"
    return line


def _embedded() -> str:
    import json

    from rolecall.policies.model import embedded_dir

    d = embedded_dir()
    if not (d / "config.json").is_file():
        return f"missing at {d} (rolecall make-base builds it)"
    try:
        info = json.loads((d / "rolecall_base.json").read_text())
        return f"{d} ({info.get('params', '?')} parameters)"
    except (OSError, ValueError):
        return str(d)
