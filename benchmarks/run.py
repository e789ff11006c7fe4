"""Speed benchmarks, one command: `python -m benchmarks.run`.

Every speed benchmark, in one run (~10 minutes on 2 cores; the first run also builds the
CoMLRL venv, ~1.5 minutes). Needs `pip install -e ".[bench]"`.
  1. TRL GRPOTrainer vs rolecall, single-agent GRPO (trl_compare.py), 3 alternating rounds: TRL
     as its users run it by default (activation recomputation on in TRL 1.16) and, apart, with
     it off.
  2. CoMLRL MAGRPO vs rolecall, two cooperating roles (comlrl_compare.py, comlrl_arm.py).
  3. Isolated vs Shared policy cost at equal work (voting, default run): seconds per
     thousand trained tokens, IP / SP, alternating steps.
  4. Mixed-adapter batching: one batch whose rows use 3 different LoRA adapters vs the same
     batch on one adapter, vs one batch per adapter, vs one generate call per row.
  5. Generation vs the machine's bound: HF generate (the engine, with its log-prob
     recorder) vs a bare decode loop (forward with KV cache, argmax) at the same batch size.
  6, 7. Scaling with group size and parallel slots; peak memory (scaling.py).

Writes benchmarks/results/<date>.json (<date>_2.json for a second run that day) with its provenance (commit, weights hash, versions,
cores, matmul rate) and prints a table.
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from datetime import date
from pathlib import Path
from statistics import median

import torch

HERE = Path(__file__).resolve().parent
PROMPTS = [f"{a}+{b}" for a in range(10, 99, 7) for b in range(11, 99, 9)]


def _engine_with_adapters(n_adapters: int, max_batch: int = 512):
    from rolecall.engines.hf import HFEngine
    from rolecall.policies.model import attach_adapters, load_base

    model, tok = load_base("embedded")
    names = [f"a{i}" for i in range(n_adapters)]
    model = attach_adapters(model, names, r=16, alpha=32, dropout=0.0, target_modules="all-linear")
    torch.manual_seed(0)
    with torch.no_grad():  # distinct adapters, as after some training (fresh LoRA is a no-op)
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.02)
    return HFEngine(model, tok, max_batch=max_batch), names


def _gen_tokens_per_s(engine, reqs, repeats: int) -> float:
    """Row-steps per second: batch x decode steps run (the longest row), over wall time.

    Different adapters stop rows at different lengths; counting the decode steps the batch
    actually ran measures the engine's speed, not how talkative an adapter is.
    """
    rates = []
    for r in range(repeats):
        torch.manual_seed(r)
        t0 = time.perf_counter()
        outs = engine.generate(reqs, temperature=0.7)
        dt = time.perf_counter() - t0
        rates.append(len(reqs) * max(len(o.completion_ids) for o in outs) / dt)
    return median(rates)


def mixed_adapter(batch: int = 48, new_tokens: int = 32, repeats: int = 5) -> dict:
    from rolecall.engines.base import GenRequest

    engine, names = _engine_with_adapters(3)
    prompts = PROMPTS[:batch]

    def reqs(policy_of):
        return [GenRequest([{"role": "user", "content": p}], policy_of(i), new_tokens) for i, p in enumerate(prompts)]

    mixed = reqs(lambda i: names[i % 3])
    single = reqs(lambda i: names[0])
    _gen_tokens_per_s(engine, mixed, 1)  # warm-up
    out = {"batch": batch, "new_tokens": new_tokens}
    # Alternate the two main arms so drift in machine load hits both.
    m, s = [], []
    for r in range(repeats):
        m.append(_gen_tokens_per_s(engine, mixed, 1))
        s.append(_gen_tokens_per_s(engine, single, 1))
    out["mixed_tokens_per_s"], out["single_adapter_tokens_per_s"] = median(m), median(s)
    per_adapter = [reqs(lambda i, a=a: a)[: batch // 3] for a in names]
    t0 = time.perf_counter()
    n = 0
    for rq in per_adapter:
        outs = engine.generate(rq, temperature=0.7)
        n += len(rq) * max(len(o.completion_ids) for o in outs)
    out["batch_per_adapter_tokens_per_s"] = n / (time.perf_counter() - t0)
    seq = mixed[:12]
    t0 = time.perf_counter()
    n = sum(len(engine.generate([r], temperature=0.7)[0].completion_ids) for r in seq)
    out["sequential_tokens_per_s"] = n / (time.perf_counter() - t0)
    out["mixed_adapter_ratio"] = out["mixed_tokens_per_s"] / out["single_adapter_tokens_per_s"]
    return out


@torch.no_grad()
def single_policy_paths(batch: int = 48, new_tokens: int = 32, repeats: int = 3) -> dict:
    """One-adapter batch two ways: the LoRA router's one-policy mode (what the engine uses when
    a chunk has one policy) vs PEFT's per-row adapter names (its mixed path, all rows the same)."""
    from transformers import GenerationConfig

    from rolecall.policies.lora_router import router_for

    engine, names = _engine_with_adapters(3)
    model, tok = engine.model, engine.tok
    model.eval()
    texts = [engine.render([{"role": "user", "content": p}]) for p in PROMPTS[:batch]]
    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    cfg = GenerationConfig(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=True, temperature=0.7,
                           top_k=None, top_p=1.0, pad_token_id=tok.pad_token_id, eos_token_id=engine.stop_ids)

    def rate(by_names: bool) -> float:
        torch.manual_seed(0)
        t0 = time.perf_counter()
        if by_names:
            model.generate(**enc, generation_config=cfg, adapter_names=[names[0]] * batch)
        else:
            with router_for(model).policy(names[0]):
                model.generate(**enc, generation_config=cfg)
        return batch * new_tokens / (time.perf_counter() - t0)

    rate(False)
    plain, by_names = [], []
    for _ in range(repeats):  # alternate the arms
        plain.append(rate(False))
        by_names.append(rate(True))
    return {"batch": batch, "new_tokens": new_tokens, "one_policy_tokens_per_s": median(plain),
            "adapter_names_tokens_per_s": median(by_names), "speedup": median(plain) / median(by_names)}


@torch.no_grad()
def forward_bound(batch: int = 64, new_tokens: int = 48, repeats: int = 3) -> dict:
    """Bare decode loop (prefill + one forward per token with KV cache) vs the engine's generate."""
    from transformers import DynamicCache

    from rolecall.engines.base import GenRequest

    engine, names = _engine_with_adapters(1)
    model, tok = engine.model, engine.tok
    model.eval()
    prompts = (PROMPTS * 2)[:batch]
    texts = [engine.render([{"role": "user", "content": p}]) for p in prompts]
    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)

    def bare() -> float:
        cache = DynamicCache()
        t0 = time.perf_counter()
        out = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], past_key_values=cache, use_cache=True)
        attn = enc["attention_mask"]
        nxt = out.logits[:, -1:].argmax(-1)
        for _ in range(new_tokens - 1):
            attn = torch.cat([attn, attn.new_ones((batch, 1))], 1)
            out = model(input_ids=nxt, attention_mask=attn, past_key_values=out.past_key_values, use_cache=True)
            nxt = out.logits[:, -1:].argmax(-1)
        return batch * new_tokens / (time.perf_counter() - t0)

    reqs = [GenRequest([{"role": "user", "content": p}], names[0], new_tokens) for p in prompts]
    bare()
    bound = median(bare() for _ in range(repeats))
    # Row-steps (batch x decode steps run) is the work the bare loop does per step.
    gen = _gen_tokens_per_s(engine, reqs, repeats)
    return {"batch": batch, "new_tokens": new_tokens, "forward_bound_tokens_per_s": bound,
            "generate_tokens_per_s": gen, "generation_fraction_of_forward_bound": gen / bound}


GOALS = {"trl_throughput_ratio": (">=", 1.5), "comlrl_throughput_ratio": (">=", 2.0), "ip_sp_cost_ratio": ("<=", 1.05),
         "mixed_adapter_ratio": (">=", 0.9), "generation_fraction_of_forward_bound": (">=", 0.5)}


def _missed(doc: dict) -> dict:
    """Each missed goal with the measured value and by how much it missed."""
    out = {}
    for k, (op, goal) in GOALS.items():
        v = doc[k]
        ok = v >= goal if op == ">=" else v <= goal
        if not ok:
            out[k] = f"{v:.3f} vs goal {op} {goal} ({'short' if op == '>=' else 'over'} by {abs(v - goal):.3f})"
    return out


def dated_result(folder: Path, day: str | None = None) -> Path:
    """`<day>.json`, or `<day>_2.json`, `_3`, ... when a run that day already wrote one: a result
    is never overwritten (benchmarks/tables.py shows the newest)."""
    day = day or str(date.today())
    out, n = folder / f"{day}.json", 1
    while out.exists():
        n += 1
        out = folder / f"{day}_{n}.json"
    return out


def main() -> None:
    from benchmarks import comlrl_compare, scaling, trl_compare
    from benchmarks.policy_sharing import ip_sp_cost

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--size", choices=("embedded", "compute"), default="embedded",
                    help="embedded: the figures below on the 1.6 M-parameter embedded model; compute: a 28 M-parameter "
                         "model where matrix multiplies dominate (benchmarks/compute.py)")
    args = ap.parse_args()
    if args.size == "compute":
        from benchmarks import compute

        raise SystemExit(compute.main(["--out", str(args.out)] if args.out else []))
    args.out = args.out or dated_result(HERE / "results")
    torch.set_num_threads(2)
    t0 = time.time()
    parts: dict[str, dict] = {}
    # TRL as its users run it (its default recomputes activations: gradient checkpointing on in
    # TRL 1.16) and, labelled apart, with the recomputation off (the least work TRL can do).
    stages = [("mixed_adapter", mixed_adapter), ("forward_bound", forward_bound), ("single_policy_paths", single_policy_paths),
              ("ip_sp_cost", ip_sp_cost), ("trl", trl_compare.compare),
              ("trl_no_checkpointing", lambda: trl_compare.compare(gradient_checkpointing=False)),
              ("comlrl", comlrl_compare.compare),
              ("scaling", scaling.scaling), ("memory", scaling.memory)]
    for i, (name, fn) in enumerate(stages, 1):
        t = time.time()
        print(f"[{i}/{len(stages)}] {name} ...", flush=True)
        parts[name] = fn()
        print(f"[{i}/{len(stages)}] {name} done in {time.time() - t:.0f} s", flush=True)
    doc = {
        "date": str(date.today()),
        "machine": f"{platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}, no GPU",
        "trl_throughput_ratio": parts["trl"]["trl_throughput_ratio"],
        "trl_no_checkpointing_throughput_ratio": parts["trl_no_checkpointing"]["trl_throughput_ratio"],
        "comlrl_throughput_ratio": parts["comlrl"]["comlrl_throughput_ratio"],
        "ip_sp_cost_ratio": parts["ip_sp_cost"]["ip_sp_cost_ratio"],
        "mixed_adapter_ratio": parts["mixed_adapter"]["mixed_adapter_ratio"],
        "generation_fraction_of_forward_bound": parts["forward_bound"]["generation_fraction_of_forward_bound"],
        "goals": {k: f"{op} {g}" for k, (op, g) in GOALS.items()},
        "details": parts,
        "wall_s": round(time.time() - t0, 1),
    }
    doc["missed"] = _missed(doc)
    from benchmarks.provenance import provenance
    from rolecall.policies.model import embedded_dir

    doc.update(provenance(embedded_dir()))  # commit, weights hash, versions, cores, matmul rate now
    doc["date"] = str(date.today())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print("| metric | value | goal |\n|---|---|---|")
    for k, goal in doc["goals"].items():
        print(f"| {k} | {doc[k]:.3f} | {goal} |")
    print(f"wrote {args.out} in {doc['wall_s']} s")


if __name__ == "__main__":
    main()
