"""Speed on the real tier's model against its peers: rolecall vs TRL's GRPOTrainer (one role)
and vs CoMLRL's MAGRPO (two roles), on SmolLM2-135M-Instruct.

    rolecall get-model smollm2-135m          # once
    python benchmarks/real_peers.py          # ~25 minutes on 2 cores (+ the CoMLRL venv, built once)

The work is `compute_peers.py`'s, at the real tier's size and on its model, identical in every
arm: the same 64 problems of `--problem-chars` random characters (rendered by SmolLM2's chat
template with its system prompt; with a BPE tokenizer the prompt lengths in tokens vary a
little between problems, the same way in every arm); every completion exactly
`--completion-tokens` long (rolecall `rollout.ignore_eos=true`, TRL and CoMLRL
`min_new_tokens`); the reward is the completion's share of digits, which varies between
samples so that no arm can skip a zero-advantage group; one optimizer step per step.

- **TRL** (single agent): 2 prompts x 8 samples a step, LoRA r `--lora-r` on every linear
  layer in both arms, no KL, TRL without activation recomputation (its default recomputes;
  off is the least work TRL can do).
- **CoMLRL** (two agents): one prompt a step, each agent 8 samples, paired. CoMLRL 1.4.3 has no
  LoRA: it trains one full model copy per agent; rolecall one shared base with a LoRA per role.
  rolecall is timed twice in each round: with its default diagnostics (a no-grad base-model
  pass for each role's KL to the base, per-role gradient shares: work no peer does) and with
  `train.diagnostics=basic`, the statistics CoMLRL computes too.

Each framework runs in the fastest setting it supports on this CPU: rolecall with its real-tier
default `model.dtype=auto` (bf16 base, fp32 adapters, where the CPU computes bf16 natively);
TRL and CoMLRL are timed once in each precision they offer (TRL: fp32, `bf16=True` autocast
over fp32 weights, bf16 weights with `bf16=True`; CoMLRL: its agents in fp32 or bf16, it has
no mixed precision), and the fastest per step runs the rounds. The probe's times are recorded.

The arms alternate within each of `--rounds` rounds (the first of each run's steps is not
timed). The ratio is rolecall's completions per second over the peer's: the median and the
range over the rounds. Appends to benchmarks/results/real_peers.json with provenance.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.comlrl_arm import problems_file  # noqa: E402  (after the path fix above)
from benchmarks.compute_peers import comlrl_ratio, trl_ratio  # noqa: E402
from benchmarks.provenance import append_result, provenance  # noqa: E402

RESULT = Path(__file__).resolve().parent / "results" / "real_peers.json"
# rolecall's default diagnostics add work no peer does: a no-grad base-model pass for the
# per-role KL to the base (`kl_ref`) and per-role gradient shares. The CoMLRL comparison also
# times rolecall with `train.diagnostics=basic` (loss, ratio, entropy and clip statistics
# only), the work CoMLRL itself does, in the same rounds.
BASIC = {"basic_diagnostics": ("train.diagnostics=basic",)}


def summary(part: dict) -> dict:
    ratios = part["ratio_per_round"]
    return {"median": part["ratio"], "min": min(ratios), "max": max(ratios), "rounds": len(ratios)}


def fastest_trl(model_dir: Path, chars: int, steps: int, completion_tokens: int, lora_r: int) -> dict:
    """One short TRL run in each precision it supports on this CPU; the fastest per step wins."""
    from benchmarks.comlrl_arm import long_problems
    from benchmarks.compute_peers import trl_digit_reward
    from benchmarks.trl_compare import PRECISIONS, trl_run

    problems = [(r["prompt"], r["answer"]) for r in long_problems(64, chars)]
    seconds = {}
    for precision in PRECISIONS:
        print(f"[peers] TRL setting probe: {precision}", flush=True)
        out = trl_run(steps, 2, 8, completion_tokens, seed=0, model_dir=str(model_dir), problems=problems,
                      reward=trl_digit_reward, fixed_length=True, gradient_checkpointing=False, lora_r=lora_r,
                      precision=precision)
        seconds[precision] = round(out["s_per_step"], 3)
    return {"s_per_step": seconds, "chosen": min(seconds, key=seconds.get)}


def fastest_comlrl(model_dir: Path, chars: int, steps: int, completion_tokens: int) -> dict:
    """One short CoMLRL run with its agents in each dtype; the fastest per step wins."""
    from benchmarks.comlrl_arm import ensure_venv, run_arm

    python = ensure_venv()
    seconds = {}
    for dtype in ("float32", "bfloat16"):
        print(f"[peers] CoMLRL setting probe: {dtype}", flush=True)
        out = run_arm(python, steps=steps, threads=2, seed=0, model=model_dir, problem_chars=chars,
                      max_new_tokens=completion_tokens, fixed_length=True, dtype=dtype)
        seconds[dtype] = round(out["s_per_step"], 3)
    return {"s_per_step": seconds, "chosen": min(seconds, key=seconds.get)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m", help="A catalogue name or a model directory.")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4, help="Steps per run, the first untimed.")
    ap.add_argument("--problem-chars", type=int, default=120)
    ap.add_argument("--completion-tokens", type=int, default=48)
    ap.add_argument("--lora-r", type=int, default=8)
    ap.add_argument("--only", choices=("trl", "comlrl"), help="One peer only.")
    ap.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16"),
                    help="rolecall's model.dtype (auto: its default on the real tier).")
    ap.add_argument("--out", type=Path, default=RESULT)
    args = ap.parse_args(argv)
    import torch

    from rolecall.policies.model import resolve_model_dir

    torch.set_num_threads(2)
    model_dir = resolve_model_dir(args.model)
    prov = provenance(model_dir)
    t0 = time.time()
    load_before = [round(x, 2) for x in os.getloadavg()]  # the machine's load before this run's own
    entry = {"model": args.model, "problem_chars": args.problem_chars, "completion_tokens": args.completion_tokens,
             "lora_r": args.lora_r, "rounds": args.rounds, "timed_steps_per_run": args.steps - 1}
    C, r = args.completion_tokens, args.lora_r
    extra = (f"model.dtype={args.dtype}",)
    entry["rolecall_dtype"] = args.dtype
    with tempfile.TemporaryDirectory(prefix="rc-real-peers-") as tmp:
        data = problems_file(Path(tmp), 64, args.problem_chars)
        if args.only in (None, "trl"):
            probe = fastest_trl(model_dir, args.problem_chars, args.steps, C, r)
            entry["trl"] = trl_ratio(model_dir, data, args.problem_chars, args.rounds, args.steps,
                                     completion_tokens=C, lora_r=r, precision=probe["chosen"], rolecall_extra=extra)
            entry["trl"]["setting_probe"] = probe
            entry["trl"]["gradient_checkpointing"] = False
            entry["trl"]["summary"] = summary(entry["trl"])
            print(f"rolecall / TRL: {entry['trl']['summary']}", flush=True)
        if args.only in (None, "comlrl"):
            probe = fastest_comlrl(model_dir, args.problem_chars, args.steps - 1, C)
            entry["comlrl"] = comlrl_ratio(model_dir, data, args.problem_chars, args.rounds, args.steps - 1,
                                           completion_tokens=C, lora_r=r, dtype=probe["chosen"],
                                           rolecall_extra=extra, variants=BASIC)
            entry["comlrl"]["setting_probe"] = probe
            entry["comlrl"]["lora"] = "rolecall: LoRA per role; CoMLRL: full weights (it has no LoRA)"
            entry["comlrl"]["summary"] = summary(entry["comlrl"])
            for part in entry["comlrl"]["variants"].values():
                part["summary"] = summary(part)
            print(f"rolecall / CoMLRL: {entry['comlrl']['summary']}", flush=True)
    entry["minutes"] = round((time.time() - t0) / 60, 1)
    entry["loadavg"] = {"before": load_before, "after": [round(x, 2) for x in os.getloadavg()]}
    append_result(args.out, "runs", {**entry, **prov, "command": " ".join(
        ["python", "benchmarks/real_peers.py", *(argv if argv is not None else sys.argv[1:])])})
    return 0


if __name__ == "__main__":
    sys.exit(main())
