"""Speed benchmarks of issue 5, one command: `python -m benchmarks.run`.

Measured here so far (items of issue 5):
  3. Isolated vs Shared policy cost at equal work (voting, default run): seconds per
     thousand trained tokens, SP / IP, alternating steps.
  4. Mixed-adapter batching: one batch whose rows use 3 different LoRA adapters vs the same
     batch on one adapter, vs one batch per adapter, vs one generate call per row.
  5. Generation vs the machine's bound: HF generate (the engine, with its log-prob
     recorder) vs a bare decode loop (forward with KV cache, argmax) at the same batch size.
Not yet measured (null in the results file, with the reason): 1. TRL GRPOTrainer,
2. CoMLRL MAGRPO, 6. scaling, 7. memory.

Writes benchmarks/results/<date>.json and prints a table.
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from datetime import date
from pathlib import Path
from statistics import fmean, median

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
    """One-adapter batch two ways: PEFT's plain path (set_adapter, what the engine uses when a
    chunk has one policy) vs per-row adapter names (PEFT's mixed path, all rows the same)."""
    from transformers import GenerationConfig

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
            model.set_adapter(names[0])
            model.generate(**enc, generation_config=cfg)
        return batch * new_tokens / (time.perf_counter() - t0)

    rate(False)
    plain, by_names = [], []
    for _ in range(repeats):  # alternate the arms
        plain.append(rate(False))
        by_names.append(rate(True))
    return {"batch": batch, "new_tokens": new_tokens, "set_adapter_tokens_per_s": median(plain),
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


def ip_sp_cost(steps: int = 4) -> dict:
    from rolecall.config import load_config
    from rolecall.train.loop import build_stack, train_step

    stacks = {r: build_stack(load_config(None, [f"routing={r}"])) for r in ("isolated", "shared")}
    for s in stacks.values():
        train_step(s, 1)  # warm-up
    per_ktok: dict[str, list[float]] = {"isolated": [], "shared": []}
    per_step: dict[str, list[float]] = {"isolated": [], "shared": []}
    for step in range(2, 2 + steps):
        for r in (("isolated", "shared") if step % 2 else ("shared", "isolated")):
            t0 = time.perf_counter()
            row, eps = train_step(stacks[r], step)
            dt = time.perf_counter() - t0
            tokens = sum(len(t.prompt_ids) + len(t.completion_ids) for e in eps for t in e.turns)
            per_step[r].append(dt)
            per_ktok[r].append(1000 * dt / tokens)
    return {"steps": steps, "ip_s_per_step": fmean(per_step["isolated"]), "sp_s_per_step": fmean(per_step["shared"]),
            "ip_s_per_ktoken": fmean(per_ktok["isolated"]), "sp_s_per_ktoken": fmean(per_ktok["shared"]),
            "ip_sp_cost_ratio": fmean(per_ktok["shared"]) / fmean(per_ktok["isolated"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE / "results" / f"{date.today()}.json")
    args = ap.parse_args()
    torch.set_num_threads(2)
    t0 = time.time()
    mixed, bound, cost, paths = mixed_adapter(), forward_bound(), ip_sp_cost(), single_policy_paths()
    doc = {
        "date": str(date.today()),
        "machine": f"{platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}, no GPU",
        "trl_throughput_ratio": None, "comlrl_throughput_ratio": None,
        "not_measured": {"trl_throughput_ratio": "issue 5 item 1 not implemented yet",
                         "comlrl_throughput_ratio": "issue 5 item 2 not implemented yet",
                         "scaling": "issue 5 item 6 not implemented yet", "memory": "issue 5 item 7 not implemented yet"},
        "ip_sp_cost_ratio": cost["ip_sp_cost_ratio"],
        "mixed_adapter_ratio": mixed["mixed_adapter_ratio"],
        "generation_fraction_of_forward_bound": bound["generation_fraction_of_forward_bound"],
        "goals": {"ip_sp_cost_ratio": "<= 1.05", "mixed_adapter_ratio": ">= 0.9",
                  "generation_fraction_of_forward_bound": ">= 0.5"},
        "details": {"mixed_adapter": mixed, "forward_bound": bound, "ip_sp_cost": cost,
                    "single_policy_paths": paths},
        "wall_s": round(time.time() - t0, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"| metric | value | goal |\n|---|---|---|")
    for k, goal in doc["goals"].items():
        print(f"| {k} | {doc[k]:.3f} | {goal} |")
    print(f"wrote {args.out} in {doc['wall_s']} s")


if __name__ == "__main__":
    main()
