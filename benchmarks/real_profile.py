"""Where a real-tier training step's time goes: decode, prefill, the update's forward and
backward, its no-grad passes, the optimizer, casts and Python, each against the matmul rate
measured in the same run.

    rolecall get-model smollm2-135m                     # once
    python -m benchmarks real_profile                   # single-agent, 8 x 8 x 48 forced tokens
    python -m benchmarks real_profile --config configs/real/smollm2-voting-ip.yaml --label voting-ip

After one untimed step, one step is timed phase by phase (wall clock, nested phases apart) and
one more identical step (`ignore_eos`: the same work) runs under torch.profiler, whose per-op
self times give each phase's split into matmul, attention, casts and copies, and the rest; what
the ops do not account for is Python and framework overhead. Each phase's matmul work is counted
from the shapes (2 x linear parameters x tokens, the output head where logits are taken, and
attention over the context; a backward of frozen weights as much again) and divided by its wall
time: its achieved rate, stated against the fp32 and bf16 matmul rates at SmolLM2's MLP shape,
measured in this run before and after the steps (the higher of the two: the rate drifts within
minutes on a VM). The CPU's model and bf16 flags are recorded: hosts differ. The profiled step
holds every op's record: about 11 GB of memory for voting-IP at its shipped shape.

Writes benchmarks/results/real_profile.json, one entry per --label (earlier labels kept).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.provenance import provenance, write_result  # noqa: E402
from benchmarks.real_precision_speed import matmul_rate  # noqa: E402

RESULT = Path(__file__).resolve().parent / "results" / "real_profile.json"
CATEGORIES = {"matmul": ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"),
              "attention": ("aten::_scaled_dot_product", "aten::scaled_dot_product"),
              "casts and copies": ("aten::copy_", "aten::_to_copy", "aten::to", "aten::clone", "aten::contiguous")}


class Phases:
    """Wall time per phase, nested phases apart (a phase's own time excludes its children's), and
    the matmul FLOPs of every model forward inside each, counted from the shapes."""

    def __init__(self, model):
        self.wall, self.flops, self.stack = defaultdict(float), defaultdict(float), []
        cfg = model.config
        self.linear = sum(p.numel() for n, p in model.named_parameters() if ".layers." in n and p.dim() == 2)
        self.head = cfg.vocab_size * cfg.hidden_size
        self.attn = 4 * cfg.num_hidden_layers * cfg.num_attention_heads * getattr(
            cfg, "head_dim", cfg.hidden_size // cfg.num_attention_heads)

    @contextlib.contextmanager
    def enter(self, name: str):
        """A span of phase `name`, also labelled for the profiler's op split."""
        with torch.profiler.record_function(name):
            self.stack.append([name, time.perf_counter(), 0.0])
            try:
                yield
            finally:
                _, t0, children = self.stack.pop()
                spent = time.perf_counter() - t0
                self.wall[name] += spent - children
                if self.stack:
                    self.stack[-1][2] += spent

    def forward_flops(self, ids: torch.Tensor, kwargs: dict) -> float:
        rows, seq = ids.shape
        mask, past = kwargs.get("attention_mask"), kwargs.get("past_key_values")
        if isinstance(mask, torch.Tensor):  # 2-D: the whole context, the cached part included
            ctx = mask.shape[-1]
        else:  # none, or one per layer kind: the cache says how much context precedes
            ctx = seq + (past.get_seq_length() if hasattr(past, "get_seq_length") else 0)
        head_tokens = rows * (1 if kwargs.get("logits_to_keep") is not None else seq)
        return 2 * self.linear * rows * seq + 2 * self.head * head_tokens + self.attn * rows * seq * ctx


def instrument(stack, phases: Phases):
    """Wrap the step's parts: the rollout, each model forward (prefill, decode, the update's
    forward with gradients, its no-grad passes), backward, the optimizer. Returns the undo."""
    import rolecall.algo.update as update  # here: the modules whose names the wrappers replace
    import rolecall.train.step as step  # (imported late, after torch's thread count is set)

    undo = []

    def wrap(owner, attr, name):
        inner = getattr(owner, attr)
        undo.append(lambda: setattr(owner, attr, inner))

        def wrapped(*a, **k):
            with phases.enter(name):
                return inner(*a, **k)
        setattr(owner, attr, wrapped)

    wrap(step, "play", "rollout (other)")
    wrap(step, "update_policies", "update (other)")
    wrap(update, "base_logps", "reference pass")
    wrap(update, "_step", "optimizer (clip and step)")
    wrap(torch.Tensor, "backward", "backward")
    for base in stack.bases.values():
        model, forward = base.model, base.model.forward

        def counted(*a, _forward=forward, **k):
            inside = [s[0] for s in phases.stack]
            ids = k.get("input_ids", a[0] if a else None)
            name = ("update forward" if torch.is_grad_enabled() else "update no-grad pass") \
                if "update (other)" in inside else ("prefill" if ids.shape[1] > 1 else "decode")
            work = phases.forward_flops(ids, k)
            phases.flops[name] += work
            if name == "update forward":  # its backward (activations only: the base is frozen) as much again
                phases.flops["backward"] += work
            with phases.enter(name):
                return _forward(*a, **k)
        model.forward = counted
        undo.append(lambda model=model: model.__dict__.pop("forward", None))
    return lambda: [u() for u in reversed(undo)]


def op_split(prof, names: set[str]) -> dict[str, dict[str, float]]:
    """Per phase (the innermost labelled span around an op): seconds of op self time by category."""
    out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for ev in prof.events():
        if ev.name in names or not ev.name.startswith("aten::"):
            continue
        parent = ev.cpu_parent
        while parent is not None and parent.name not in names:
            parent = parent.cpu_parent
        cat = next((c for c, prefixes in CATEGORIES.items() if ev.name.startswith(prefixes)), "other ops")
        out[parent.name if parent else "step (other)"][cat] += ev.self_cpu_time_total / 1e6
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/real/smollm2-single.yaml", help="a config, or `embedded`")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--shipped", action="store_true", help="the config's own problems, samples and token budget "
                    "(--prompts, --samples and --tokens ignored); completions still run to the budget")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="auto", help="model.dtype")
    ap.add_argument("--label", default=None, help="the entry's name (default: the config's stem and dtype)")
    ap.add_argument("--out", type=Path, default=RESULT)
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(args.threads)
    from rolecall.config import load_config  # rolecall after the thread count and HF_HUB_OFFLINE are set
    from rolecall.policies.model import resolve_model_dir  # (as every real-tier benchmark does)
    from rolecall.policies.precision import cpu_flags  # (the same: late)
    from rolecall.train.stack import build_stack  # (the same: late)
    from rolecall.train.step import train_step  # (the same: late)

    shape = [] if args.shipped else [f"rollout.problems_per_step={args.prompts}", f"rollout.group_size={args.samples}",
                                     f"rollout.max_new_tokens={args.tokens}"]
    overrides = [f"model.dtype={args.dtype}", *shape, "rollout.ignore_eos=true", f"train.threads={args.threads}",
                 "task.n_val=8", "train.steps=4"]
    stack = build_stack(load_config(None if args.config == "embedded" else args.config, overrides))
    cfg = stack.cfg
    train_step(stack, 1)  # untimed: first calls pick kernels and fill caches
    rates = {"float32": [matmul_rate(torch.float32)], "bfloat16": [matmul_rate(torch.bfloat16)]}
    phases = Phases(stack.model)
    undo = instrument(stack, phases)
    with phases.enter("step (other)"):
        row, _ = train_step(stack, 2)
    timed = dict(phases.wall)
    flops = dict(phases.flops)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with phases.enter("step (other)"):
            train_step(stack, 3)
    undo()
    split = op_split(prof, set(timed))
    dtype = str(next(stack.model.parameters()).dtype).removeprefix("torch.")
    for dtype_, r in rates.items():  # before and after the steps: the rate drifts within minutes on a VM
        r.append(matmul_rate(getattr(torch, dtype_)))
    peak = {k: max(v) for k, v in rates.items()}  # the higher: a phase's share of it is not flattered
    stack.close()
    model_dir = resolve_model_dir(cfg.model.path)
    parts = {}
    for name, wall in sorted(timed.items(), key=lambda kv: -kv[1]):
        ops = {k: round(v, 3) for k, v in split.get(name, {}).items()}
        gflops = flops.get(name, 0.0) / 1e9
        parts[name] = {"wall_s": round(wall, 3), "share": round(wall / sum(timed.values()), 3),
                       "ops_s": ops, "unaccounted_s": round(max(0.0, wall - sum(ops.values())), 3),
                       "matmul_gflop": round(gflops, 2),
                       **({"gflops_per_s": round(gflops / wall, 1),
                           "of_fp32_matmul_rate": round(gflops / wall / peak["float32"], 3),
                           "of_bf16_matmul_rate": round(gflops / wall / peak["bfloat16"], 3)} if gflops else {})}
        print(f"{name:<26} {wall:7.2f} s  {parts[name].get('gflops_per_s', '-'):>7} GFLOP/s  ops {ops}", flush=True)
    flags = sorted(cpu_flags() & {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"})
    entry = {"config": args.config, "dtype": dtype, "work": {
             "prompts": cfg.rollout.problems_per_step, "samples": cfg.rollout.group_size,
             "max_new_tokens": cfg.rollout.max_new_tokens, "ignore_eos": True, "threads": args.threads},
             "step_s": round(row["time/step_s"], 2), "phases": parts, "cpu_flags": flags,
             "matmul_gflops_per_s": {k: round(v, 1) for k, v in peak.items()},
             "matmul_gflops_per_s_before_after": {k: [round(x, 1) for x in v] for k, v in rates.items()},
             "loadavg": os.getloadavg(),
             "provenance": provenance(model_dir, matmul=False)}  # each entry its own: labels may come from other hosts
    doc = json.loads(args.out.read_text()) if args.out.is_file() else {}
    entries = {**doc.get("entries", {}), args.label or f"{Path(args.config).stem}-{dtype}": entry}
    write_result(args.out, {"entries": entries}, model_dir=model_dir)
    print(f"step {entry['step_s']} s ({dtype}); matmul rate fp32 {peak['float32']:.0f}, bf16 {peak['bfloat16']:.0f} "
          f"GFLOP/s; wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
