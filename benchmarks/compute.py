"""Speed where compute dominates: a 28 M-parameter Qwen3-shaped model (random weights) on
multi-agent-length work, model-FLOP utilization against the machine's measured matmul rate.

    python -m benchmarks.compute            # ~75-90 minutes on 2 cores (--no-peers: ~45)
    python -m benchmarks.compute --only training   # one part again, into the existing result file
    python -m benchmarks.run --size compute # the same, from the benchmark runner

Writes benchmarks/results/compute.json. What it measures, in one process, 2 threads:

1. The machine's limit: fp32 matmul FLOP/s at the model's own GEMM shapes (every linear layer
   of a training micro-batch, forward and the input-gradient of the backward), timed alone;
   and at a large square shape for reference.
2. The training phase: `update_policies` (the code a training step runs) on an aggregator's
   batch: 4 prompts of 800 tokens (a question and 3 candidates of 256 tokens) x 8 samples of
   256-token completions, one adapter, one on-policy mini-batch, LoRA r 16 on every linear
   layer. Model-FLOP utilization = the FLOPs the work needs / time / the limit.
3. Generation: the HF engine's `generate` (with its log-prob recording) vs a bare decode loop
   (prefill, then one forward per token with the KV cache, argmax) at the same batch, both
   256 tokens per row with EOS ignored, on an 800-token prompt shared by 8 samples; and a
   batch whose rows use 3 adapters vs the same batch on one (distinct prompts).
4. A profile of the training phase (torch.profiler): where the time goes by operator.
5. Scaling with the completion length and the number of policies (time, peak memory).
   IP vs SP for whole training steps of the default voting workflow on this model.
6. The peer ratios on the same model: TRL's GRPOTrainer and CoMLRL's MAGRPO against rolecall on
   identical fixed-length work (compute_peers.py).

FLOPs (`flops_*` below): a matmul of [m, k] x [k, n] is 2mkn. Per token the model's linear
layers cost 2 N_lin forward (N_lin = 28.3 M weights of the decoder layers), attention 4 H d_h c
forward (QK^T and AV over the c positions the token attends to, causal), LoRA 2 r (in + out) per
adapted layer, the tied head 2 d V where logits are needed. Training with a frozen base needs
the forward, the input-gradient of every layer (the same FLOPs again: no weight gradients
for frozen weights) and the LoRA weight gradients: linear 4 N_lin, attention 3x forward, LoRA
3x forward, less the input-gradients of the first layer's q, k, v, which read the frozen
embedding. tests/test_compute_flops.py checks these counts against torch's FLOP counter. Prompt sharing is counted as done: each distinct prompt once, each completion on
its prompt's keys and values. Padding and masked-out attention are not counted: they are
work the implementation does but the task does not need.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.provenance import write_result  # noqa: E402

from benchmarks.compute_model import Shape, make_model  # noqa: E402  (after the path fix above)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
RESULT = HERE / "results" / "compute.json"


def _time(fn, repeats: int) -> float:
    fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return median(ts)


def matmul_limit(shape: Shape, tokens: int = 4096, repeats: int = 5, dtype: str = "float32") -> dict:
    """GEMM FLOP/s in `dtype` (the one training computes in) at the model's shapes: each linear
    layer forward ([T, in] x [in, out]) and its input-gradient ([T, out] x [out, in]),
    FLOP-weighted; and a 2048^3 square for reference."""
    flops, seconds = 0.0, 0.0
    dt = getattr(torch, dtype)
    for i, o in shape.linears():
        for a, b in ((i, o), (o, i)):
            x, w = torch.randn(tokens, a, dtype=dt), torch.randn(a, b, dtype=dt)
            seconds += _time(lambda: x @ w, repeats)
            flops += 2 * tokens * a * b
    sq = torch.randn(2048, 2048, dtype=dt)
    square = 2 * 2048 ** 3 / _time(lambda: sq @ sq, repeats)
    return {"model_shapes_gflops": round(flops / seconds / 1e9, 1), "square_2048_gflops": round(square / 1e9, 1),
            "tokens_per_gemm": tokens}


def _rows(tok_count: int, prompts: int, samples: int, prompt_len: int, completion_len: int, policy: str,
          seed: int = 0):
    from rolecall.algo.batch import Row

    rng = random.Random(seed)
    rows = []
    for p in range(prompts):
        prompt = [rng.randrange(3, tok_count) for _ in range(prompt_len)]
        for g in range(samples):
            completion = [rng.randrange(3, tok_count) for _ in range(completion_len)]
            rows.append(Row(prompt + completion, prompt_len, [-4.0] * completion_len, 1.0 if g % 2 else -1.0,
                            "aggregator", "aggregator", policy))
    return rows


def flops_train(shape: Shape, prompts: int, samples: int, P: int, C: int) -> int:
    """FLOPs one update over the batch needs (see the module docstring)."""
    lin, lora = 2 * shape.n_lin, shape.lora_flops_per_token
    prompt_tokens = prompts * P
    prompt_attn = prompts * sum(shape.attn_flops(i + 1) for i in range(P))
    rows = prompts * samples
    done_C = C - 1  # the last completion token predicts nothing: the completion pass stops one short
    comp_attn = rows * sum(shape.attn_flops(P + j + 1) for j in range(done_C))
    forward = (prompt_tokens + rows * done_C) * (lin + lora) + prompt_attn + comp_attn
    head = 2 * shape.hidden * shape.vocab * (prompts + rows * done_C)
    # backward: input-gradients of the frozen layers (= their forward), LoRA and attention 2x forward;
    # the first layer's q, k, v read the frozen embedding, so no input-gradient flows into them
    skip = 2 * sum(i * o for i, o in shape.linears()[:3]) + sum(2 * shape.lora_r * i for i, _ in shape.linears()[:3])
    backward = (prompt_tokens + rows * done_C) * (lin + 2 * lora - skip) + 2 * (prompt_attn + comp_attn)
    return forward + backward + 2 * head


def stack_update(overrides: dict, prompts: int, samples: int, P: int, C: int):
    """The update a training step runs (`update_policies`, one on-policy mini-batch, basic
    diagnostics) on a `single` run's stack with `overrides`, over `prompts` x `samples` random
    rows of P + C tokens. Returns it as a function of no arguments, and the stack (close it)."""
    import rolecall
    from rolecall.train.stack import build_stack
    from rolecall.algo.update import update_policies

    cfg = rolecall.make_config({"workflow": {"name": "single"}, **overrides,
                                "train": {"diagnostics": "basic", **overrides.get("train", {})}})
    stack = build_stack(cfg)
    policy = stack.routing.trainable[0]
    rows = _rows(len(stack.tok), prompts, samples, P, C, policy)
    rng = random.Random(0)

    def run():
        update_policies(stack.model, {policy: rows}, stack.optims, cfg.algo, cfg.optim, pad_id=stack.tok.pad_token_id,
                        temperature=0.7, rng=rng, mini_batch_rows=None, kl_ref=False, grad_shares=False)

    return run, stack


def train_phase(model_dir: Path, shape: Shape, prompts: int = 4, samples: int = 8, P: int = 800, C: int = 256,
                repeats: int = 3, profile: bool = True, *, limit, dtype: str = "float32") -> dict:
    """Seconds of one update (median of `repeats` after a warm-up). `limit` (a function giving
    the matmul limit in GFLOP/s) is measured before every timed repeat and
    after the last, and each repeat's MFU is taken against the mean of the two around it:
    this VM's matmul rate drifts by a third within minutes, so one limit for the whole run
    would not describe the minute a repeat ran in."""
    run, stack = stack_update({"model": {"path": str(model_dir), "dtype": dtype},
                               "lora": {"r": shape.lora_r, "alpha": 2 * shape.lora_r}, "train": {"threads": 2}},
                              prompts, samples, P, C)
    flops = flops_train(shape, prompts, samples, P, C)
    run()  # warm-up
    limits, times = [limit()], []
    for _ in range(repeats):
        times.append(_once(run))
        limits.append(limit())
    seconds = median(times)
    per = [flops / t / 1e9 / ((a + b) / 2) for t, a, b in zip(times, limits, limits[1:])]
    mfu = {"seconds_each": [round(t, 3) for t in times], "limit_gflops_around": [round(x, 1) for x in limits],
           "mfu_each": [round(x, 3) for x in per], "mfu": round(median(per), 3)}
    out = {"prompts": prompts, "samples": samples, "prompt_tokens": P, "completion_tokens": C,
           "seconds": round(seconds, 3), "tflops_needed": round(flops / 1e12, 4),
           "achieved_gflops": round(flops / seconds / 1e9, 1), **mfu}
    if profile:
        out["profile"] = _profile(run)
    stack.close()
    return out


def _profile(fn, top: int = 12) -> list[dict]:
    """Self CPU time by operator, the `top` largest, as shares of the total."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    total = sum(e.self_cpu_time_total for e in events)
    events.sort(key=lambda e: -e.self_cpu_time_total)
    return [{"op": e.key, "share": round(e.self_cpu_time_total / total, 3), "calls": e.count} for e in events[:top]]


def flops_generate(shape: Shape, prompts: int, samples: int, P: int, C: int) -> tuple[int, int]:
    """(prefill, decode) FLOPs: each distinct prompt once; each row's C tokens, the first from the
    prefill's logits, the other C - 1 by one forward each over its growing context."""
    lin, lora = 2 * shape.n_lin, shape.lora_flops_per_token
    head = 2 * shape.hidden * shape.vocab
    prefill = prompts * (P * (lin + lora) + sum(shape.attn_flops(i + 1) for i in range(P)) + head)
    rows = prompts * samples
    decode = rows * sum(lin + lora + shape.attn_flops(P + j + 1) + head for j in range(1, C))
    return prefill, decode


def exact_prompt(engine, tok, P: int, rng: random.Random, alphabet: str = "0123456789+-=abc ") -> str:
    """A random user message whose rendered prompt is exactly P tokens, for any tokenizer: with
    the character tokenizer, P minus the template's tokens characters; with a BPE, characters
    are added while the prompt is short, then removed while it is long (merges can skip P: then
    another draw)."""
    def length(text: str) -> int:
        return len(tok(engine.render([{"role": "user", "content": text}]), add_special_tokens=False)["input_ids"])

    overhead = length("")
    for _ in range(20):
        text = "".join(rng.choice(alphabet) for _ in range(P - overhead))
        n = length(text)
        if n == P:
            return text
        while n < P:  # fewer tokens than characters: merges
            text += rng.choice(alphabet)
            n = length(text)
        while n > P:
            text = text[:-1]
            n = length(text)
        if n == P:
            return text
    raise RuntimeError(f"no random prompt of exactly {P} tokens in 20 draws")


@torch.no_grad()
def generation(model_dir: Path, shape: Shape, prompts: int = 2, samples: int = 8, P: int = 800, C: int = 256,
               repeats: int = 2, dtype: str = "float32") -> dict:
    from rolecall.engines.base import GenRequest
    from rolecall.engines.decode_kv import buffer_cache, folded_decode
    from rolecall.engines.hf import HFEngine
    from rolecall.policies.model import attach_adapters, load_base

    model, tok = load_base(str(model_dir), dtype)
    adapters = ["agg", "gen1", "gen2"]
    model = attach_adapters(model, adapters, r=shape.lora_r, alpha=2 * shape.lora_r, dropout=0.0,
                            target_modules="all-linear")
    with torch.no_grad():  # distinct adapters, as after some training (a fresh LoRA B is zero)
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.02)
    model.eval()
    engine = HFEngine(model, tok, ignore_eos=True)  # every row runs its full budget in every arm
    rng = random.Random(1)
    texts = [exact_prompt(engine, tok, P, rng) for _ in range(prompts)]
    reqs = [GenRequest([{"role": "user", "content": t}], "agg", C) for t in texts for _ in range(samples)]
    ids = [tok(engine.render(r.messages), add_special_tokens=False)["input_ids"] for r in reqs]
    assert {len(x) for x in ids} == {P}, "prompt length"
    B = len(reqs)
    input_ids = torch.tensor(ids)
    attn = torch.ones_like(input_ids)

    def engine_run():
        outs = engine.generate(reqs, temperature=0.7)
        assert all(len(o.completion_ids) == C for o in outs)

    def bare(share_prompts: bool, transformers_cache: bool = False):
        """Prefill (each distinct prompt once when `share_prompts`, as the engine does; else every
        row), then argmax decoding with the KV cache: the least a decode loop can do, on the same
        cache and attention as the engine, or with `transformers_cache` on transformers' dynamic
        cache and SDPA (what the engine's cache and attention gain; these prompts have no padding,
        so transformers' SDPA needs no key repeat here and the gain is the cache's)."""
        from contextlib import nullcontext

        from transformers import DynamicCache

        from rolecall.policies.lora_router import router_for
        from rolecall.policies.model import last_position

        with router_for(model).policy("agg"), (nullcontext() if transformers_cache else folded_decode(model)):
            # the engine's cache and decode attention, or transformers' own
            cache = DynamicCache(config=model.config) if transformers_cache else buffer_cache(model.config, P + C)
            first = input_ids[::samples] if share_prompts else input_ids
            out = model(input_ids=first, attention_mask=attn[: len(first)], past_key_values=cache, use_cache=True,
                        logits_to_keep=last_position(first.shape[1], first.device))  # as the engine does
            logits = out.logits[:, -1:]
            if share_prompts:
                index = torch.arange(B) // samples
                cache.reorder_cache(index)
                logits = logits[index]
            a = attn
            nxt = logits.argmax(-1)
            for _ in range(C - 1):
                a = torch.cat([a, a.new_ones((B, 1))], 1)
                out = model(input_ids=nxt, attention_mask=a, past_key_values=cache, use_cache=True)
                nxt = out.logits[:, -1:].argmax(-1)

    # Mixed-adapter batch vs one adapter, on B distinct prompts (no prefill to share in either arm).
    distinct = [GenRequest([{"role": "user", "content": exact_prompt(engine, tok, P, rng)}], "agg", C) for _ in range(B)]
    mixed = [GenRequest(r.messages, adapters[i % len(adapters)], C) for i, r in enumerate(distinct)]

    arms = {"engine": engine_run, "bare_shared_prefill": lambda: bare(True), "bare_every_row": lambda: bare(False),
            "bare_transformers_cache": lambda: bare(True, transformers_cache=True),
            "one_adapter": lambda: engine.generate(distinct, temperature=0.7),
            "three_adapters_mixed": lambda: engine.generate(mixed, temperature=0.7)}
    times: dict[str, list[float]] = {k: [] for k in arms}
    for fn in arms.values():
        fn()  # warm-up
    for _ in range(repeats):  # alternate the arms against drift
        for k, fn in arms.items():
            times[k].append(_once(fn))
    prefill_f, decode_f = flops_generate(shape, prompts, samples, P, C)
    t_prefill = _once(lambda: engine._prefill(input_ids, attn, ["agg"] * B))
    te, tb, tr, tt, one, mix = (median(times[k]) for k in arms)
    return {"rows": B, "distinct_prompts": prompts, "prompt_tokens": P, "completion_tokens": C,
            "engine_s": round(te, 3), "bare_loop_shared_prefill_s": round(tb, 3), "bare_loop_every_row_s": round(tr, 3),
            "bare_loop_transformers_cache_s": round(tt, 3), "cache_and_attention_gain": round(tt / tb, 3),
            "engine_vs_bare": round(tb / te, 3), "one_adapter_distinct_prompts_s": round(one, 3),
            "three_adapters_mixed_s": round(mix, 3), "mixed_adapter_ratio": round(one / mix, 3),
            "prefill_s": round(t_prefill, 3),
            "prefill_gflops": round(prefill_f / t_prefill / 1e9, 1),
            "decode_gflops": round(decode_f / max(te - t_prefill, 1e-9) / 1e9, 1),
            "engine_gflops": round((prefill_f + decode_f) / te / 1e9, 1)}


def update_setup(model_dir: Path, shape: Shape, completion: int, policies: int, prompts: int, samples: int,
                 P: int = 800, micro_batch_tokens: int | None = None):
    """A training update of `prompts` x `samples` rows with `completion`-token completions, the
    prompts dealt over `policies` adapters (prompt k trains policy k mod n, as each role has
    prompts of its own: the same work whatever n), all of them in each forward through the LoRA
    router. Returns the update as a function of no arguments, its rows and its micro-batch budget."""
    from rolecall.config import AlgoCfg, OptimCfg
    from rolecall.policies.model import adapter_params, attach_adapters, load_base
    from rolecall.algo.memory import micro_batch_tokens as resolved_micro_batch_tokens
    from rolecall.algo.optim import build_optimizers
    from rolecall.algo.update import update_policies

    model, tok = load_base(str(model_dir))
    names = [f"p{i}" for i in range(policies)]
    model = attach_adapters(model, names, r=shape.lora_r, alpha=2 * shape.lora_r, dropout=0.0,
                            target_modules="all-linear")
    for p in model.parameters():
        p.requires_grad_(False)
    for n in names:
        for p in adapter_params(model, n).values():
            p.requires_grad_(True)
    optims = build_optimizers(model, tuple(names), OptimCfg())
    rows = _rows(len(tok), prompts, samples, P, completion, "")
    by_policy = {n: [] for n in names}
    for i, r in enumerate(rows):
        r.policy = names[(i // samples) % policies]
        by_policy[r.policy].append(r)
    rng = random.Random(0)
    # the default micro-batch budget (`auto`: about 1 GiB of activations on a CPU) is what a run gets
    algo = AlgoCfg() if micro_batch_tokens is None else AlgoCfg(micro_batch_tokens=micro_batch_tokens)

    def run():
        update_policies(model, by_policy, optims, algo, OptimCfg(), pad_id=tok.pad_token_id, temperature=0.7,
                        rng=rng, mini_batch_rows=None, kl_ref=False, grad_shares=False)

    return run, rows, resolved_micro_batch_tokens(algo.micro_batch_tokens, model)


def scaling_point(model_dir: Path, shape: Shape, completion: int, policies: int, prompts: int = 6,
                  samples: int = 2, P: int = 800, repeats: int = 1, micro_batch_tokens: int | None = None) -> dict:
    """One training update (`update_setup`): seconds and this process's peak RSS (run it in a
    process of its own to read the peak of this point). A prompt shared by two adapters would be
    two prompts' work, since the adapter changes its keys and values."""
    run, rows, budget = update_setup(model_dir, shape, completion, policies, prompts, samples, P, micro_batch_tokens)
    seconds = _time(run, repeats)
    flops = flops_train(shape, prompts, samples, P, completion)
    return {"completion_tokens": completion, "policies": policies, "rows": len(rows),
            "micro_batch_tokens": budget, "seconds": round(seconds, 3),
            "achieved_gflops": round(flops / seconds / 1e9, 1),
            "peak_rss_mb": _peak_rss_mb()}


def ip_sp(model_dir: Path, steps: int = 10) -> dict:
    """IP vs SP for whole training steps on this model: the default voting workflow (3
    generators, an aggregator that reads their 3 candidates of 256 tokens), 1 problem x 4
    samples, every turn 256 tokens (EOS ignored), short random problems; the reward is the
    final answer's share of digits, so no group has zero advantages. Isolated-Policy trains an
    adapter per role, Shared-Policy one for both; the two alternate step by step."""
    from benchmarks.comlrl_arm import dataset_overrides, problems_file
    from benchmarks.policy_sharing import ip_sp_cost

    with tempfile.TemporaryDirectory(prefix="rc-ipsp-") as tmp:
        data = problems_file(Path(tmp), 64, 120)
        extra = (*dataset_overrides(model_dir, data), "reward.name=benchmarks.compute_peers:digit_share_reward",
                 "rollout.max_new_tokens=256", "rollout.group_size=4", "rollout.problems_per_step=1",
                 "train.threads=2")
        return ip_sp_cost(steps, extra)


def _peak_rss_mb() -> float:
    """This process's peak RSS since its exec (VmHWM). Not `ru_maxrss`: that one survives exec,
    so a process started from a large parent reports the parent's size."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def scaling(model_dir: Path, completions=(256, 512, 1024, 2048), policies=(1, 2, 3, 6),
            micro_batches=(8192, 4096)) -> dict:
    """Each point in a process of its own (its peak RSS is its own): time and memory against
    the completion length (1 policy), the number of policies (256-token completions), and the
    micro-batch budget at the longest completions (what bounds the activations' memory)."""
    import subprocess

    def point(c: int, n: int, mbt: int | None = None) -> dict:
        spec = f"{c},{n}" if mbt is None else f"{c},{n},{mbt}"
        cmd = [sys.executable, "-m", "benchmarks.compute", "--point", spec, "--model", str(model_dir)]
        out = subprocess.run(cmd, cwd=HERE.parent, capture_output=True, text=True, timeout=1800)
        if out.returncode != 0:
            raise RuntimeError(f"scaling point {c},{n} failed: {out.stderr[-2000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])

    by_length = [point(c, 1) for c in completions]
    by_policies = [point(256, n) for n in policies]
    one = by_policies[0]["seconds"]
    for row in by_policies:
        row["time_vs_one_policy"] = round(row["seconds"] / one, 3)
    by_budget = [by_length[-1]] + [point(completions[-1], 1, m) for m in micro_batches]
    return {"by_completion_length": by_length, "by_policies": by_policies, "by_micro_batch_tokens": by_budget}


def positive_int(text: str) -> int:
    """argparse type: a count of at least 1."""
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def _once(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=RESULT)
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--no-scaling", action="store_true")
    ap.add_argument("--no-peers", action="store_true", help="skip the TRL and CoMLRL ratios (compute_peers.py)")
    ap.add_argument("--only", choices=("training", "ip_sp"),
                    help="measure this part again and replace it in the existing result file")
    ap.add_argument("--ip-sp-steps", type=positive_int, default=10, metavar="N",
                    help="step pairs for IP vs SP (about 2 minutes a pair here; more pairs resolve a smaller gap)")
    ap.add_argument("--point", help=argparse.SUPPRESS)  # "COMPLETION,POLICIES": one scaling point (internal)
    ap.add_argument("--model", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    torch.set_num_threads(2)
    shape = Shape()
    if args.point:
        c, n, *mbt = map(int, args.point.split(","))
        print(json.dumps(scaling_point(args.model, shape, c, n, micro_batch_tokens=mbt[0] if mbt else None)))
        return 0
    t0 = time.time()
    if args.only and not args.out.is_file():  # before the model is built
        ap.error(f"--only {args.only} replaces one part of an existing result file, and {args.out} does not "
                 "exist: run the whole command first, or name the file with --out")
    model_dir = make_model(Path(tempfile.mkdtemp(prefix="rc-compute-")) / "model", shape)
    # This VM's matmul rate drifts (73-125 GFLOP/s within minutes on a slow day): each phase's
    # MFU is taken against the limit measured right around it.
    rate = lambda: matmul_limit(shape)["model_shapes_gflops"]  # noqa: E731
    if args.only:
        doc = json.loads(args.out.read_text())
        if args.only == "training":
            part = doc["training_phase"] = train_phase(model_dir, shape, profile=not args.no_profile, limit=rate)
        else:
            part = doc["ip_sp"] = ip_sp(model_dir, args.ip_sp_steps)
        part["measured"] = time.strftime("%Y-%m-%d %H:%M")
        write_result(args.out, doc, model_dir=model_dir)
        print(f"{args.only}: {({k: v for k, v in part.items() if k != 'profile'})}; wrote {args.out}")
        return 0
    n_params = shape.n_lin + shape.hidden * shape.vocab
    print(f"model: {n_params / 1e6:.1f} M parameters ({shape})", flush=True)
    limit = matmul_limit(shape)
    print(f"matmul limit: {limit}", flush=True)
    train = train_phase(model_dir, shape, profile=not args.no_profile, limit=rate)
    print(f"training phase: {({k: v for k, v in train.items() if k != 'profile'})}", flush=True)
    before = rate()
    gen = generation(model_dir, shape)
    around = (before + rate()) / 2
    gen["limit_gflops_around"] = round(around, 1)
    gen["prefill_mfu"] = round(gen["prefill_gflops"] / around, 3)
    gen["decode_mfu"] = round(gen["decode_gflops"] / around, 3)
    print(f"generation: {gen}", flush=True)
    scale = None if args.no_scaling else scaling(model_dir)
    if scale:
        print(f"scaling: {scale}", flush=True)
    cost = ip_sp(model_dir, args.ip_sp_steps)
    print(f"IP/SP: {cost['ip_sp_cost_ratio']:.3f}", flush=True)
    peers = None
    if not args.no_peers:
        from benchmarks.compute_peers import peers as peer_ratios

        peers = peer_ratios(model_dir)
        print(f"peers: TRL {peers['trl']['ratio']}, CoMLRL {peers['comlrl']['ratio']}", flush=True)
    doc = {"date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
           f"{torch.get_num_threads()} threads, torch {torch.__version__}",
           "model": {"parameters_m": round(n_params / 1e6, 2), "n_lin_m": round(shape.n_lin / 1e6, 2),
                     **shape.__dict__},
           "matmul_limit": limit, "training_phase": train, "generation": gen, "scaling": scale, "ip_sp": cost,
           "peers": peers,
           "goals": {"training_mfu": ">= 0.60", "engine_vs_bare": ">= 0.80", "trl_ratio": ">= 1.5",
                     "comlrl_ratio": ">= 2", "mixed_adapter_ratio": ">= 0.9",
                     "ip_sp_cost_ratio": "<= 1.05"},
           "wall_s": round(time.time() - t0, 1)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_result(args.out, doc, model_dir=model_dir)
    print(f"training MFU {train['mfu']:.2f}, engine/bare {gen['engine_vs_bare']:.2f}; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
