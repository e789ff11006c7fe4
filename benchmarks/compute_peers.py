"""Peer ratios where compute dominates: rolecall against TRL's GRPOTrainer (one role) and
CoMLRL's MAGRPO (two roles) on the compute benchmark's 28 M-parameter Qwen3 (random weights).

    python -m benchmarks.compute_peers      # ~22 minutes on 2 cores (3 rounds) (the CoMLRL venv is built first if missing)

Writes benchmarks/results/compute_peers.json (`python -m benchmarks.run --size compute` runs it
too, after the MFU measurements, into the `peers` section of compute.json). The work is fixed-length in every arm, so each
framework does the same sampling and the same training tokens:

- Prompts of random characters (one token each), rendered by the same chat template: the
  generator's prompt comes to 800 tokens, an aggregator's length (a question and 3 candidates
  of 256 tokens). Every completion is exactly 256 tokens: rolecall runs with
  `rollout.ignore_eos=true`, TRL and CoMLRL with `min_new_tokens` = the budget.
- The reward is the completion's share of digits (the pair's mean share for two roles): it
  varies between samples of a random model, so no arm can skip a zero-advantage group.
- **TRL** (single agent): 2 prompts x 8 samples a step, LoRA r 16 on every linear layer,
  one optimizer step, no KL, no activation recomputation (TRL's default recomputes; off is
  the least work TRL can do). rolecall: the `single` workflow on the same rows, with its
  default diagnostics (which add one no-grad base-model pass over 16 rows a step).
- **CoMLRL** (two roles, as in the small-model comparison, comlrl_compare.py): one prompt a
  step, each agent 8 samples from its own role prompt, paired; CoMLRL trains one full model
  copy per agent (it has no LoRA), one sequence per forward; rolecall one shared base with a
  LoRA per role.

The arms alternate within a round so drift hits both; each run's first step is not timed.
The ratio is rolecall's completions per second over the peer's, the median over rounds.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.provenance import write_result  # noqa: E402
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.comlrl_arm import dataset_overrides, problems_file  # noqa: E402  (after the path fix above)

PROMPT_TOKENS, COMPLETION_TOKENS, GROUP = 800, 256, 8


def digit_share_reward(problem, answer: str) -> float:
    """rolecall custom reward (`reward.name=benchmarks.compute_peers:digit_share_reward`)."""
    from benchmarks.comlrl_arm import digit_share

    return digit_share(answer)


def trl_digit_reward(completions, **_) -> list[float]:
    from benchmarks.comlrl_arm import digit_share

    return [digit_share(c[-1]["content"] if isinstance(c, list) else c) for c in completions]


def problem_chars(model_dir: Path) -> int:
    """Characters of problem text that make the generator's rendered prompt PROMPT_TOKENS long."""
    from string import Template

    from rolecall.policies.model import load_tokenizer
    from rolecall.workflows import load_prompts

    tok = load_tokenizer(str(model_dir))
    msgs = [{"role": "user", "content": Template(load_prompts("math")["generator"]).substitute(problem="")}]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    return PROMPT_TOKENS - len(tok(text, add_special_tokens=False)["input_ids"])


def trl_ratio(model_dir: Path, data: Path, chars: int, rounds: int, steps: int, prompts: int = 2, *,
              completion_tokens: int = COMPLETION_TOKENS, lora_r: int = 16, precision: str = "fp32",
              rolecall_extra: tuple[str, ...] = ()) -> dict:
    """TRL (in `precision`, see trl_compare.trl_run) against rolecall (with `rolecall_extra`
    overrides), alternating within each round."""
    from benchmarks.comlrl_arm import long_problems
    from benchmarks.trl_compare import rolecall_run, trl_run

    problems = [(r["prompt"], r["answer"]) for r in long_problems(64, chars)]
    extra = (*dataset_overrides(model_dir, data, lora_r), "reward.name=benchmarks.compute_peers:digit_share_reward",
             *rolecall_extra)
    arms: dict[str, list[dict]] = {"trl": [], "rolecall": []}
    for r in range(rounds):
        for arm in (("trl", "rolecall") if r % 2 == 0 else ("rolecall", "trl")):
            print(f"[peers] TRL round {r + 1}/{rounds}: {arm}", flush=True)
            if arm == "trl":
                out = trl_run(steps, prompts, GROUP, completion_tokens, seed=r, model_dir=str(model_dir),
                              problems=problems, reward=trl_digit_reward, fixed_length=True,
                              gradient_checkpointing=False, lora_r=lora_r, precision=precision)
            else:
                out = rolecall_run(steps, prompts, GROUP, completion_tokens, seed=r, extra=extra)
            arms[arm].append(_brief(out))
    ratios = [a["completions_per_s"] / b["completions_per_s"] for a, b in zip(arms["rolecall"], arms["trl"])]
    import trl

    return {"trl_version": trl.__version__, "precision": precision, "prompts_per_step": prompts, "group_size": GROUP, **arms,
            "ratio_per_round": [round(x, 3) for x in ratios], "ratio": round(median(ratios), 3)}


def comlrl_ratio(model_dir: Path, data: Path, chars: int, rounds: int, steps: int, *,
                 completion_tokens: int = COMPLETION_TOKENS, lora_r: int = 16, dtype: str = "float32",
                 rolecall_extra: tuple[str, ...] = (), variants: dict[str, tuple[str, ...]] | None = None) -> dict:
    """CoMLRL (its agents' weights in `dtype`) against rolecall (with `rolecall_extra`
    overrides), alternating within each round. `variants` (name: more overrides) are more
    rolecall arms timed in the same rounds, each with its own ratios under `variants`."""
    from benchmarks.comlrl_arm import ensure_venv, run_arm
    from benchmarks.comlrl_compare import DigitShare, rolecall_run

    python = ensure_venv()
    extras = {"rolecall": (), **(variants or {})}
    arms: dict[str, list[dict]] = {"comlrl": [], **{name: [] for name in extras}}
    for r in range(rounds):
        order = list(arms) if r % 2 == 0 else list(arms)[::-1]
        for arm in order:
            print(f"[peers] CoMLRL round {r + 1}/{rounds}: {arm}", flush=True)
            if arm == "comlrl":
                out = run_arm(python, steps=steps, threads=2, seed=r, model=model_dir, problem_chars=chars,
                              max_new_tokens=completion_tokens, fixed_length=True, dtype=dtype)
            else:
                out = rolecall_run(steps, GROUP, completion_tokens, seed=r,
                                   extra=(*dataset_overrides(model_dir, data, lora_r), *rolecall_extra, *extras[arm]),
                                   verifier=DigitShare())
            arms[arm].append(_brief(out))

    def ratios(name: str) -> list[float]:
        return [round(a["completions_per_s"] / b["completions_per_s"], 3) for a, b in zip(arms[name], arms["comlrl"])]

    out = {"agents": 2, "dtype": dtype, "group_size": GROUP, "comlrl": arms["comlrl"], "rolecall": arms["rolecall"],
           "ratio_per_round": ratios("rolecall"), "ratio": round(median(ratios("rolecall")), 3)}
    if variants:
        out["variants"] = {name: {"overrides": list(more), "rolecall": arms[name], "ratio_per_round": ratios(name),
                                  "ratio": round(median(ratios(name)), 3)} for name, more in variants.items()}
    return out


def _brief(run: dict) -> dict:
    keep = ("s_per_step", "completions_per_s", "mean_completion_tokens", "gen_s_per_step", "update_s_per_step",
            "trained_params_per_agent", "mean_joint_reward")
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in run.items() if k in keep}


def peers(model_dir: Path, rounds: int = 3, steps: int = 3) -> dict:
    """Both ratios on the model in `model_dir` (benchmarks.compute.make_model)."""
    t0 = time.time()
    chars = problem_chars(model_dir)
    with tempfile.TemporaryDirectory(prefix="rc-peers-") as tmp:
        data = problems_file(Path(tmp), 64, chars)
        out = {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": COMPLETION_TOKENS, "rounds": rounds,
               "timed_steps_per_run": steps - 1,
               "trl": trl_ratio(model_dir, data, chars, rounds, steps),
               "comlrl": comlrl_ratio(model_dir, data, chars, rounds, steps - 1)}
    out["wall_s"] = round(time.time() - t0, 1)
    out["date"] = time.strftime("%Y-%m-%d")
    return out


def main(argv: list[str] | None = None) -> int:
    import torch

    from benchmarks.compute_model import Shape, make_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (a ratio is reported with its range)")
    ap.add_argument("--steps", type=int, default=3, help="steps per run, the first untimed")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "compute_peers.json",
                    help="the result file whose `peers` section this writes")
    args = ap.parse_args(argv)
    torch.set_num_threads(2)
    model_dir = make_model(Path(tempfile.mkdtemp(prefix="rc-compute-")) / "model", Shape())
    result = peers(model_dir, args.rounds, args.steps)
    doc = json.loads(args.out.read_text()) if args.out.exists() else {}
    doc["peers"] = result
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_result(args.out, doc, model_dir=model_dir)
    print(f"rolecall / TRL {result['trl']['ratio']:.2f}, rolecall / CoMLRL {result['comlrl']['ratio']:.2f}; "
          f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
