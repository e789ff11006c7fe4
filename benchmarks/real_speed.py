"""Speed on the real tier's model: do the CPU fast paths hold on SmolLM2-135M-Instruct (llama)?

    rolecall get-model smollm2-135m          # once
    python benchmarks/real_speed.py          # ~8 minutes on 2 cores

The fast paths (shared-prefix attention in training, the buffer cache and folded decode in
generation, the fused LoRA node) were built and measured on Qwen3-shaped models; SmolLM2 is a
llama (30 layers, 576 wide, 9 query heads on 3 key heads, tied 49,152-token head). This
measures, in one process with 2 threads, on the converted checkpoint with LoRA r 8 on every
linear layer (the real tier's adapters), the same two things as `compute.py`:

1. Training: `update_policies` (what a training step runs) on `--prompts` x `--samples` rows
   of `--prompt-tokens` + `--completion-tokens` tokens, one adapter, one mini-batch. Model-FLOP
   utilization = the FLOPs the work needs (`compute.flops_train`) / time / the matmul limit at
   SmolLM2's own GEMM shapes in the dtype training computes in (`--dtype`, by default what
   `model.dtype: auto` picks: bfloat16 on a CPU with native bf16), the limit sampled before and after every timed repeat: each
   repeat is divided by the mean of the two samples around it, and the result gives the
   median and the range of the repeats, with the limit's median and range.
2. Generation: the HF engine against a bare decode loop (prefill each distinct prompt once,
   then argmax with the KV cache) on the same cache and attention, and on transformers' own
   cache; a batch mixing 3 adapters against one. Arms alternate over `--repeats` rounds.

Appends to benchmarks/results/real_speed.json with provenance (commit, weights hash,
versions, machine). The goals the issue sets: generation >= 0.8 of the bare loop, training
>= 0.6 of the matmul limit.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from statistics import median

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.compute import generation, matmul_limit, train_phase  # noqa: E402  (after the path fix above)
from benchmarks.compute_model import Shape  # noqa: E402
from benchmarks.provenance import append_result, provenance  # noqa: E402

RESULT = Path(__file__).resolve().parent / "results" / "real_speed.json"


def shape_of(model_dir: Path, lora_r: int) -> Shape:
    """The FLOP-counting shape of a llama/Qwen3 checkpoint, from its config.json."""
    c = json.loads((model_dir / "config.json").read_text())
    if not c.get("tie_word_embeddings", False):
        raise SystemExit("real_speed counts a tied output head; this checkpoint's head is untied")
    return Shape(hidden=c["hidden_size"], layers=c["num_hidden_layers"], heads=c["num_attention_heads"],
                 kv_heads=c["num_key_value_heads"], head_dim=c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"],
                 intermediate=c["intermediate_size"], vocab=c["vocab_size"], lora_r=lora_r)


def spread(values: list[float]) -> dict:
    return {"median": round(median(values), 3), "min": round(min(values), 3), "max": round(max(values), 3),
            "n": len(values)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m", help="A catalogue name or a model directory.")
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--completion-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3, help="Timed repeats of each measure.")
    ap.add_argument("--lora-r", type=int, default=8)
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--dtype", default="auto", help="What training computes in: auto (what `model.dtype: auto` "
                                                    "picks on this machine), float32 or bfloat16.")
    ap.add_argument("--out", type=Path, default=RESULT)
    args = ap.parse_args(argv)
    from rolecall.policies.model import resolve_model_dir

    torch.set_num_threads(2)
    from rolecall.policies.precision import auto_dtype

    dtype = str(auto_dtype(torch.device("cpu")).dtype).removeprefix("torch.") if args.dtype == "auto" else args.dtype
    model_dir = resolve_model_dir(args.model)
    shape = shape_of(model_dir, args.lora_r)
    prov = provenance(model_dir)
    limits: list[float] = []

    def rate() -> float:  # every sample is kept: the limit's spread is part of the result
        limits.append(matmul_limit(shape, tokens=2048, repeats=3, dtype=dtype)["model_shapes_gflops"])
        return limits[-1]

    P, C = args.prompt_tokens, args.completion_tokens
    t0 = time.time()
    train = train_phase(model_dir, shape, prompts=args.prompts, samples=args.samples, P=P, C=C,
                        repeats=args.repeats, profile=not args.no_profile, limit=rate, dtype=dtype)
    train["mfu_spread"] = spread(train["mfu_each"])
    print(f"training phase: {({k: v for k, v in train.items() if k != 'profile'})}", flush=True)
    before = rate()
    gen = generation(model_dir, shape, prompts=args.prompts, samples=args.samples, P=P, C=C, repeats=args.repeats,
                     dtype=dtype)
    around = (before + rate()) / 2
    gen.update(limit_gflops_around=round(around, 1), prefill_mfu=round(gen["prefill_gflops"] / around, 3),
               decode_mfu=round(gen["decode_gflops"] / around, 3))
    print(f"generation: {gen}", flush=True)
    entry = {"model": args.model, "dtype": dtype, "shape": shape.__dict__, "lora_r": args.lora_r,
             "matmul_limit_gflops": spread(limits), "training_phase": train, "generation": gen,
             "goals": {"generation_vs_bare_loop": {"goal": 0.8, "measured": gen["engine_vs_bare"]},
                       "training_mfu": {"goal": 0.6, "measured": train["mfu"],
                                        "range": [train["mfu_spread"]["min"], train["mfu_spread"]["max"]]}},
             "minutes": round((time.time() - t0) / 60, 1), **prov,
             "command": " ".join(["python", "benchmarks/real_speed.py", *(argv if argv is not None else sys.argv[1:])])}
    append_result(args.out, "runs", entry)
    print(json.dumps(entry["goals"]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
