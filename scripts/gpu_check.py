"""The stages of scripts/gpu_check.sh, run inside the venv it made (see that script's header).

Each stage runs on its own: a failure is recorded (with the end of its traceback) and the next
stage still runs, so one JSON says what ran, what failed and what was measured.

MFU here counts the FLOPs of the linear layers and the LM head only (attention and LoRA are left
out), so it is a lower bound: a training step over a row of P prompt and C completion tokens
needs 2·N_lin·(P+C) forward and as much again for the input-gradients (the base is frozen: no
weight gradients), plus 4·d·V·C for the head at the completion positions.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from statistics import median

REPO = Path(__file__).resolve().parent.parent
# Dense bf16 tensor-core peaks from the vendors' data sheets (SXM parts), in FLOP/s.
BF16_PEAK = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "L4": 121e12, "A10": 125e12}
# Qwen3-0.6B's decoder (its config.json); the vocabulary is rolecall's character tokenizer's,
# since random weights need a tokenizer that decodes every id they may sample.
QWEN3_06B = dict(hidden=1024, intermediate=3072, layers=28, heads=16, kv_heads=8, head_dim=128)
SMALL = dict(hidden=128, intermediate=384, layers=2, heads=4, kv_heads=2, head_dim=32)


class Check:
    """The JSON being built: stages in order, each ok or failed, and the clock."""

    def __init__(self, out: Path, minutes: float) -> None:
        self.out, self.t0, self.budget_s = out, time.time(), minutes * 60
        self.doc: dict = {"schema": 1, "stages": {}, "ran": [], "failed": [], "skipped": {}}

    def left_s(self) -> float:
        return self.budget_s - (time.time() - self.t0)

    def stage(self, name: str, fn, *args, **kw):
        print(f"[gpu_check] {name} ...", flush=True)
        t = time.time()
        try:
            result = fn(*args, **kw)
            self.doc["stages"][name] = {"ok": True, "seconds": round(time.time() - t, 2), **(result or {})}
            self.doc["ran"].append(name)
        except Exception as e:  # noqa: BLE001  (a failed stage is recorded; the next one runs)
            self.doc["stages"][name] = {"ok": False, "seconds": round(time.time() - t, 2),
                                        "error": f"{type(e).__name__}: {e}"[:2000],
                                        "traceback": traceback.format_exc()[-4000:]}
            self.doc["failed"].append(name)
            print(f"[gpu_check] {name} FAILED: {type(e).__name__}: {e}", flush=True)
        self.save()

    def skip(self, name: str, why: str) -> None:
        self.doc["skipped"][name] = why
        print(f"[gpu_check] {name} skipped: {why}", flush=True)
        self.save()

    def save(self) -> None:
        self.doc["elapsed_s"] = round(time.time() - self.t0, 1)
        self.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.doc, indent=1))
        os.replace(tmp, self.out)


def _git(*args: str) -> str | None:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def environment(args) -> dict:
    import importlib.metadata as md

    import torch

    versions = {}
    for name in ("torch", "transformers", "peft", "safetensors", "tokenizers", "pydantic", "math-verify", "bm25s",
                 "typer", "rich", "pyyaml", "rolecall"):
        try:
            versions[name] = md.version(name)
        except md.PackageNotFoundError:
            versions[name] = None
    cuda = torch.cuda.is_available()
    pip_check = (Path(args.work) / "pip_check.txt").read_text() if (Path(args.work) / "pip_check.txt").exists() else ""
    return {"commit": os.environ.get("ROLECALL_COMMIT") or _git("rev-parse", "HEAD"),
            "dirty": bool(_git("status", "--porcelain")) if _git("rev-parse", "HEAD") else None,
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "python": platform.python_version(),
            "versions": versions, "install": args.install, "pip_check": pip_check.strip()[-2000:],
            "cuda": cuda, "cuda_version": torch.version.cuda,
            "device": torch.cuda.get_device_name(0) if cuda else platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "mode": "cpu" if args.cpu else "gpu"}


def pytest_gpu() -> dict:
    proc = subprocess.run([sys.executable, "-m", "pytest", "-m", "gpu", "tests/test_gpu.py", "-q", "-rs", "-o", "addopts=",
                           "-p", "no:cacheprovider"], cwd=REPO, capture_output=True, text=True, timeout=600)
    tail = (proc.stdout + proc.stderr)[-3000:]
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|error|errors)", tail)}
    if proc.returncode not in (0, 5) or counts.get("failed") or counts.get("error") or counts.get("errors"):
        raise RuntimeError(f"pytest -m gpu exited {proc.returncode}: {tail[-1500:]}")
    return {"counts": counts, "returncode": proc.returncode, "tail": tail[-800:]}


def matmul_rate(device: str, dtype, n: int, reps: int) -> float:
    """FLOP/s of an n×n×n product on `device` (the mean of `reps` after 3 warm-ups)."""
    import torch

    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(3):
        a @ b
    sync()
    t = time.perf_counter()
    for _ in range(reps):
        a @ b
    sync()
    return 2 * n ** 3 * reps / (time.perf_counter() - t)


def make_random_model(directory: Path, shape: dict) -> Path:
    """A Qwen3 of `shape` with random weights, rolecall's character tokenizer and chat template
    (the compute benchmark's builder)."""
    sys.path.insert(0, str(REPO))
    from benchmarks.compute_model import Shape, make_model

    return make_model(directory, Shape(**shape))


def linear_weights(model_dir: Path) -> tuple[int, int, int]:
    """(N_lin of the decoder layers, hidden size, vocabulary) from a model's config.json."""
    c = json.loads((model_dir / "config.json").read_text())
    d, i, h = c["hidden_size"], c["intermediate_size"], c["num_attention_heads"]
    hd = c.get("head_dim") or d // h
    kv = c.get("num_key_value_heads", h)
    per_layer = d * h * hd + 2 * d * kv * hd + h * hd * d + 3 * d * i
    return c["num_hidden_layers"] * per_layer, d, c["vocab_size"]


def voting_steps(model_dir: Path, *, device: str, dtype: str, steps: int, max_new_tokens: int, ignore_eos: bool,
                 peak: float, measured) -> dict:
    """`steps` training steps of voting (Isolated) through the trainer's own stack; times, tokens, MFU."""
    import torch

    import rolecall
    from rolecall.train.stack import build_stack
    from rolecall.train.step import train_step

    cfg = rolecall.make_config({
        "model": {"path": str(model_dir), "device": device, "dtype": dtype},
        "workflow": {"name": "voting"}, "routing": "isolated", "task": {"n_val": 8},
        "rollout": {"problems_per_step": 4, "group_size": 4, "max_new_tokens": max_new_tokens, "ignore_eos": ignore_eos},
        "train": {"steps": steps, "diagnostics": "basic", "kl_ref": False}})
    n_lin, d, vocab = linear_weights(model_dir)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    stack = build_stack(cfg)
    rows = []
    try:
        for step in range(1, steps + 1):
            row, episodes = train_step(stack, step)
            if device == "cuda":
                torch.cuda.synchronize()
            turns = [t for ep in episodes for t in ep.turns]
            prompt = sum(len(t.prompt_ids) for t in turns)
            completion = sum(len(t.completion_ids) for t in turns)
            train_s = row["time/step_s"] - row["time/rollout_s"]
            flops = 4 * n_lin * (prompt + completion) + 4 * d * vocab * completion
            rows.append({"step": step, "step_s": round(row["time/step_s"], 3), "rollout_s": round(row["time/rollout_s"], 3),
                         "train_s": round(train_s, 3), "turns": len(turns), "prompt_tokens": prompt,
                         "completion_tokens": completion,
                         "gen_tokens_per_s": round(completion / row["time/rollout_s"], 1),
                         "train_tokens_per_s": round((prompt + completion) / train_s, 1),
                         "train_tflop": round(flops / 1e12, 4),
                         "loss_finite": all(v == v for k, v in row.items() if k.endswith("/loss"))})
    finally:
        stack.verifier.close()
    after = rows[1:] or rows  # the first step pays for warm-up (kernels, allocator, the verifier's worker)
    train_rate = median(r["train_tflop"] * 1e12 / r["train_s"] for r in after)
    measured_now = measured()
    out = {"params_decoder_linear": n_lin, "hidden": d, "vocab": vocab, "dtype": dtype, "steps": rows,
           "median_step_s": round(median(r["step_s"] for r in after), 3),
           "median_gen_tokens_per_s": round(median(r["gen_tokens_per_s"] for r in after), 1),
           "median_train_tokens_per_s": round(median(r["train_tokens_per_s"] for r in after), 1),
           # 4 significant figures: the --cpu run's tiny model trains at well under 0.001 TFLOP/s
           "train_tflop_per_s": float(f"{train_rate / 1e12:.4g}"),
           "mfu_vs_peak": round(train_rate / peak, 4) if peak else None,
           "mfu_vs_measured_matmul": round(train_rate / measured_now, 4),
           "matmul_tflop_per_s_after": round(measured_now / 1e12, 2)}
    if device == "cuda":
        out["peak_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2 ** 30, 2)
    return out


def resume(model_dir: Path, *, device: str, dtype: str) -> dict:
    """Two steps with a checkpoint after each, then --resume to a third: the rows must continue."""
    import rolecall

    cfg = {"model": {"path": str(model_dir), "device": device, "dtype": dtype}, "workflow": {"name": "voting"},
           "task": {"n_val": 4}, "rollout": {"problems_per_step": 2, "group_size": 2, "max_new_tokens": 8},
           "train": {"steps": 2, "checkpoint_every": 1, "val_every": 2, "diagnostics": "basic"}}
    out = Path(tempfile.mkdtemp(prefix="rolecall-gpu-resume-")) / "run"
    run = rolecall.train_run(cfg, out, notify=lambda text: None)
    more = rolecall.train_run(None, run.path, steps=3, resume=True, notify=lambda text: None)
    steps = [r["step"] for r in more.metrics if "reward/mean" in r]
    if steps != [1, 2, 3]:
        raise RuntimeError(f"after resume the step rows are {steps}, expected [1, 2, 3]")
    return {"step_rows": steps, "checkpoint": str(more.latest_checkpoint.name)}


def smollm2_dir(arg: str | None) -> tuple[Path | None, str]:
    """SmolLM2's HF directory: the --smollm2 argument (a directory or a .gguf converted on the way)."""
    if not arg:
        return None, "no --smollm2 given"
    p = Path(arg).expanduser()
    if p.suffix == ".gguf":
        try:
            from rolecall.policies.gguf import converted_dir
        except ImportError:
            return None, "this rolecall cannot convert .gguf files"
        return converted_dir(p), ""
    if (p / "config.json").is_file():
        return p, ""
    return None, f"{p} is neither a .gguf file nor a model directory"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--install", default="unknown")
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--smollm2")
    ap.add_argument("--minutes", type=float, default=8)
    args = ap.parse_args()
    check = Check(Path(args.out), args.minutes)
    check.stage("environment", environment, args)
    env = check.doc["stages"]["environment"]
    check.doc.update({k: env.get(k) for k in ("commit", "dirty", "date", "device", "mode", "versions")})
    import torch

    gpu = not args.cpu
    if gpu and not torch.cuda.is_available():
        check.doc["failed"].append("cuda")
        check.doc["stages"]["cuda"] = {"ok": False, "error": "torch sees no CUDA device (use --cpu for the CPU run)"}
        check.save()
        return 1
    device, dtype = ("cuda", "bfloat16") if gpu else ("cpu", "float32")
    mm = (lambda: matmul_rate("cuda", torch.bfloat16, 8192, 10)) if gpu else (lambda: matmul_rate("cpu", torch.float32, 512, 5))
    check.stage("pytest_gpu", pytest_gpu)
    rates: list[float] = []

    def sample_matmul() -> float:
        r = mm()
        rates.append(r)
        return r

    check.stage("matmul", lambda: {"tflop_per_s": round(sample_matmul() / 1e12, 2),
                                   "what": "bf16 8192^3" if gpu else "fp32 512^3"})
    name = torch.cuda.get_device_name(0) if gpu else ""
    peak = next((v for k, v in BF16_PEAK.items() if k in name), None) if gpu else None
    check.doc["bf16_peak_tflop_per_s"] = peak / 1e12 if peak else None
    work = Path(args.work)
    shape, label = (QWEN3_06B, "qwen3-0.6b-shape") if gpu else (SMALL, "qwen3-small-shape (cpu)")
    model = work / "random-model"
    check.stage("make_model", lambda: {"shape": label, "path": str(make_random_model(model, shape))})
    tokens = 128 if gpu else 16
    if model.exists():
        check.stage(f"voting_{label.split()[0]}", voting_steps, model, device=device, dtype=dtype, steps=4 if gpu else 2,
                    max_new_tokens=tokens, ignore_eos=True, peak=peak, measured=sample_matmul)
        check.stage("resume", resume, model, device=device, dtype=dtype)
    real, why = smollm2_dir(args.smollm2)
    if real is None:
        check.skip("voting_smollm2", why)
    elif check.left_s() < 120:
        check.skip("voting_smollm2", f"under 2 minutes of the {args.minutes}-minute budget left")
    else:
        check.stage("voting_smollm2", voting_steps, real, device=device, dtype=dtype, steps=3 if gpu else 1,
                    max_new_tokens=tokens, ignore_eos=True, peak=peak, measured=sample_matmul)
    check.doc["matmul_tflop_per_s"] = {"median": round(median(rates) / 1e12, 2), "min": round(min(rates) / 1e12, 2),
                                       "max": round(max(rates) / 1e12, 2), "samples": len(rates)} if rates else None
    check.doc["within_budget"] = check.left_s() >= 0
    check.save()
    return 1 if check.doc["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
