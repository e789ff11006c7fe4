"""What `model.dtype: auto` means on this machine, and why.

bfloat16 where the hardware computes it natively and it measures faster; float32 elsewhere.
On a GPU that is `torch.cuda.is_bf16_supported()`. On a CPU it takes two things: the
processor's flags name a native bf16 instruction (`avx512_bf16`, or AMX's `amx_bf16`), and a
short probe finds bf16 at least `MIN_SPEEDUP` times as fast *for the model being loaded*: its
own forward and activation backward (what a LoRA update runs), bf16 against fp32, best of a few
repeats. A model as small as the embedded one is bound by casts and per-layer overhead, not by
matmuls, so a matmul's speed-up says nothing about it; the model's own pass does. Without native
bf16, CPU kernels emulate it and fp32 is faster, and nothing is measured. A probe runs once per
machine, torch version, thread count and model, and is cached.

Only the frozen base weights and their activations take this dtype: LoRA weights, optimizer
state and the loss's log-probs stay float32 (PEFT keeps adapters in float32; `rolecall.loss`
computes log-probs in float32).
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from rolecall.paths import cache_dir

NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
MIN_SPEEDUP = 1.2  # below this, bf16's rounding buys too little to be the default
_PROBE_SHAPE = (512, 576, 1536)  # tokens x hidden x MLP width of a ~135 M-parameter model
_PROBE_TOKENS = (2, 64)  # sequences x tokens of the model probe: a few seconds on a 135 M model, once


@dataclass(frozen=True)
class AutoDtype:
    dtype: torch.dtype
    why: str


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The CPU's feature flags (Linux `/proc/cpuinfo`); empty where they cannot be read."""
    for line in (_cpuinfo_lines() if cpuinfo is None else cpuinfo.splitlines()):
        if line.startswith(("flags", "Features")):
            return set(line.partition(":")[2].split())
    return set()


def auto_dtype(device: torch.device, model_dir: Path | str | None = None, *, flags: set[str] | None = None,
               probe: Callable[[], float] | None = None) -> AutoDtype:
    """The dtype `auto` resolves to on `device` for the model in `model_dir` (None: a matmul of a
    ~135 M model's shape), with the reason in words. `flags` and `probe` (returning bf16's speed
    over fp32's) stand in for the machine's own in tests."""
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported():
            return AutoDtype(torch.bfloat16, "this GPU computes bfloat16 natively")
        return AutoDtype(torch.float32, "this GPU does not support bfloat16")
    if device.type != "cpu":
        return AutoDtype(torch.float32, f"bfloat16 is not chosen automatically on {device.type}")
    native = sorted(set(NATIVE_BF16_FLAGS) & (cpu_flags() if flags is None else flags))
    if not native:
        return AutoDtype(torch.float32, f"this CPU has no native bfloat16 ({' or '.join(NATIVE_BF16_FLAGS)} not in its "
                                        "flags), so float32 kernels are faster")
    speedup = probe() if probe else cached_probe(None if model_dir is None else str(model_dir))
    what = "a bfloat16 matmul" if model_dir is None else "this model's forward and backward in bfloat16"
    if speedup < MIN_SPEEDUP:
        return AutoDtype(torch.float32, f"this CPU has {', '.join(native)}, but {what} measured only "
                                        f"{speedup:.2f}x the float32 rate (below {MIN_SPEEDUP:g}x)")
    return AutoDtype(torch.bfloat16, f"this CPU has {', '.join(native)} and {what} measured {speedup:.2f}x "
                                     "the float32 rate (base weights in bfloat16; LoRA, optimizer and log-probs in float32)")


def measure_speedup(repeats: int = 3) -> float:
    """bf16 matmul rate over fp32's at `_PROBE_SHAPE`, best of `repeats` each (about a second)."""
    n, k, m = _PROBE_SHAPE
    best = {}
    for dtype in (torch.float32, torch.bfloat16):
        a, b = torch.randn(n, k, dtype=dtype), torch.randn(k, m, dtype=dtype)
        best[dtype] = _best_time(lambda: a @ b, repeats)
    return best[torch.float32] / max(best[torch.bfloat16], 1e-9)


def measure_model_speedup(model_dir: Path | str, repeats: int = 3) -> float:
    """The model's forward and activation backward (frozen weights, as under LoRA) on
    `_PROBE_TOKENS` random tokens: fp32's best time over bf16's, after a warm-up of each."""
    from transformers import AutoModelForCausalLM  # heavy; only where a CPU with native bf16 asks

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, local_files_only=True)
    model.requires_grad_(False)
    ids = torch.randint(0, model.config.vocab_size, _PROBE_TOKENS, generator=torch.Generator().manual_seed(0))

    def once():
        embeds = model.get_input_embeddings()(ids).detach().requires_grad_()
        model(inputs_embeds=embeds).logits.float().logsumexp(-1).mean().backward()

    best = {}
    for dtype in (torch.float32, torch.bfloat16):
        model.to(dtype)
        best[dtype] = _best_time(once, repeats)
    return best[torch.float32] / max(best[torch.bfloat16], 1e-9)


def _best_time(fn: Callable[[], object], repeats: int) -> float:
    """`fn`'s fastest of `repeats` timed calls, after one untimed (kernel selection, first touch)."""
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


@functools.cache  # one answer per process, even where the cache file cannot be written
def cached_probe(model_dir: str | None = None) -> float:
    """`measure_speedup()` (no model) or `measure_model_speedup(model_dir)`, measured once per CPU
    model, torch version, thread count and model (its config.json and weights files' sizes)."""
    model = next((line.partition(":")[2].strip() for line in _cpuinfo_lines() if line.startswith("model name")), "cpu")
    key = f"{model} | torch {torch.__version__} | {torch.get_num_threads()} threads"
    if model_dir is not None:
        key += f" | model {_model_identity(Path(model_dir))}"
    path = cache_dir("precision.json")
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    if isinstance(known.get(key), (int, float)):
        return float(known[key])
    speedup = measure_speedup() if model_dir is None else measure_model_speedup(model_dir)
    known = known if isinstance(known, dict) else {}
    known[key] = round(speedup, 3)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(known, indent=1) + "\n")
        os.replace(tmp, path)
    except OSError:
        pass  # an unwritable cache only means measuring again next time
    return speedup


def _model_identity(model_dir: Path) -> str:
    """A cheap stand-in for the model's identity: its config.json and its weights files' sizes."""
    h = hashlib.sha256()
    for f in sorted(model_dir.iterdir()):
        if f.name == "config.json":
            h.update(f.read_bytes())
        elif f.suffix in (".safetensors", ".bin"):
            h.update(f"{f.name}:{f.stat().st_size}".encode())
    return h.hexdigest()[:16]


def _cpuinfo_lines() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text(errors="replace").splitlines()
    except OSError:
        return []
