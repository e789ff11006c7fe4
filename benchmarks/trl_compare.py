"""Speed benchmark 1 of `benchmarks/run.py`: single-agent GRPO, rolecall vs TRL's GRPOTrainer, on identical work.

Both arms train the embedded tiny model (same weights) with a fresh LoRA (r 16, alpha 32,
all linear modules, dropout 0) on the same prompts (the `single` workflow's generator
prompt over the built-in arithmetic training problems, rendered by the same chat
template), P prompts x G = 8 samples per step, the same completion budget, temperature
0.7 with no top-k/top-p, the same strict \\boxed{} reward function, clip 0.2/0.28, no KL,
one PPO epoch and one optimizer step per training step, lr 2e-3. The runs alternate
(TRL, rolecall, TRL, rolecall, ...) in one process so machine drift hits both; the first
step of each run (warm-up, lazy initialisation) is not timed.

Throughput = completions per second of training-step wall time (generation, reward,
advantages, loss, backward, optimizer step, per-step logging). TRL's per-step time is
read between `on_step_begin` and `on_step_end` callbacks; rolecall's around
`train_step`. Completion tokens are counted too, since sampled lengths differ slightly.

Run alone: `python -m benchmarks.trl_compare` (needs `pip install -e ".[bench]"`).
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from statistics import fmean, median

import torch

LR, R, ALPHA, TEMPERATURE = 2e-3, 16, 32, 0.7
PRECISIONS = ("fp32", "autocast", "bf16")  # the settings of TRL's that trl_run can time


def _problems():
    from rolecall.tasks.arithmetic import ArithmeticTask

    return ArithmeticTask().train()


def _reward(completions, answer, **_) -> list[float]:
    """TRL reward function: rolecall's strict math grader on the completion text."""
    from rolecall.rewards.math import grade_math

    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [float(grade_math(t, a, checker="strict").value or 0.0) for t, a in zip(texts, answer)]


def trl_run(steps: int, prompts_per_step: int, group: int, max_new_tokens: int, seed: int, *,
            model_dir: str | None = None, problems: list[tuple[str, str]] | None = None, reward=None,
            fixed_length: bool = False, gradient_checkpointing: bool | None = None, lora_r: int = R,
            precision: str = "fp32") -> dict:
    """TRL's GRPOTrainer on the embedded model and arithmetic problems, or on `model_dir` with
    `problems` ((text, answer) pairs) graded by `reward` (a TRL reward function). `fixed_length`
    makes every completion exactly `max_new_tokens` long (EOS suppressed until then).
    `gradient_checkpointing` None keeps TRL's default (on: it recomputes activations). LoRA
    alpha is 2 `lora_r`. `precision` is one of PRECISIONS: "fp32" (weights and compute),
    "autocast" (fp32 weights, `bf16=True`: the Trainer's bf16 autocast) or "bf16" (bf16 base
    weights and `bf16=True`; PEFT keeps the adapters in fp32, as rolecall does)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: expected one of {PRECISIONS}")
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rolecall.policies.model import embedded_dir, load_tokenizer
    from rolecall.workflows import load_prompts
    from string import Template

    template = Template(load_prompts("math")["generator"])
    problems = problems or [(p.prompt, p.answer) for p in _problems()]
    ds = Dataset.from_dict({"prompt": [[{"role": "user", "content": template.substitute(problem=q)}] for q, _ in problems],
                            "answer": [a for _, a in problems]})
    path = model_dir or str(embedded_dir())
    tok = load_tokenizer(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16 if precision == "bf16" else torch.float32)
    times: list[float] = []
    lengths: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            times.append(time.perf_counter() - self.t0)

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "completions/mean_length" in logs:
                lengths.append(logs["completions/mean_length"])

    with tempfile.TemporaryDirectory() as out:
        args = GRPOConfig(
            output_dir=out, max_steps=steps, per_device_train_batch_size=prompts_per_step * group,
            gradient_accumulation_steps=1, num_generations=group, max_completion_length=max_new_tokens,
            temperature=TEMPERATURE, top_p=1.0, top_k=0, learning_rate=LR, lr_scheduler_type="constant",
            warmup_steps=0, beta=0.0, epsilon=0.2, epsilon_high=0.28, num_iterations=1, loss_type="grpo",
            scale_rewards="group", logging_steps=1, report_to="none", save_strategy="no", use_cpu=True,
            bf16=precision != "fp32", seed=seed, dataloader_num_workers=0, disable_tqdm=True,
            chat_template_kwargs={"enable_thinking": False}, max_grad_norm=1.0, weight_decay=0.0,
            **({} if gradient_checkpointing is None else {"gradient_checkpointing": gradient_checkpointing}),
            generation_kwargs={"min_new_tokens": max_new_tokens} if fixed_length else None)
        trainer = GRPOTrainer(model=model, reward_funcs=reward or _reward, args=args, train_dataset=ds, processing_class=tok,
                              peft_config=LoraConfig(r=lora_r, lora_alpha=2 * lora_r, lora_dropout=0.0,
                                                     target_modules="all-linear", task_type="CAUSAL_LM"),
                              callbacks=[Clock()])
        trainer.train()
    timed = times[1:]
    completions = prompts_per_step * group
    return {"s_per_step": fmean(timed), "completions_per_s": completions / fmean(timed),
            "completion_tokens_per_s": fmean(lengths[1:]) * completions / fmean(timed) if lengths[1:] else None,
            "mean_completion_tokens": fmean(lengths[1:]) if lengths[1:] else None, "step_s": timed}


def rolecall_run(steps: int, prompts_per_step: int, group: int, max_new_tokens: int, seed: int,
                 extra: tuple[str, ...] = ()) -> dict:
    from rolecall.config import load_config
    from rolecall.train.stack import build_stack
    from rolecall.train.step import train_step

    cfg = load_config(None, ["workflow.name=single", f"rollout.problems_per_step={prompts_per_step}",
                             f"rollout.group_size={group}", f"rollout.max_new_tokens={max_new_tokens}",
                             f"rollout.temperature={TEMPERATURE}", f"lora.r={R}", f"lora.alpha={ALPHA}",
                             f"optim.lr={LR}", "optim.schedule=constant", "optim.warmup_steps=0",
                             f"train.steps={steps}", f"train.seed={seed}", "train.threads=2", *extra])
    stack = build_stack(cfg)
    times, tokens = [], []
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        row, eps = train_step(stack, step)
        times.append(time.perf_counter() - t0)
        tokens.append(fmean(len(t.completion_ids) for e in eps for t in e.turns))
    stack.verifier.close()
    timed, completions = times[1:], prompts_per_step * group
    return {"s_per_step": fmean(timed), "completions_per_s": completions / fmean(timed),
            "completion_tokens_per_s": fmean(tokens[1:]) * completions / fmean(timed),
            "mean_completion_tokens": fmean(tokens[1:]), "step_s": timed}


def compare(rounds: int = 3, steps: int = 6, prompts_per_step: int = 8, group: int = 8,
            max_new_tokens: int = 32, gradient_checkpointing: bool | None = None) -> dict:
    """Alternating runs; the ratio is rolecall's completions/s over TRL's, median over rounds.
    `gradient_checkpointing` None runs TRL as its users do by default; the setting TRL then
    used is recorded either way."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    arms: dict[str, list[dict]] = {"trl": [], "rolecall": []}
    for r in range(rounds):
        for arm in (("trl", "rolecall") if r % 2 == 0 else ("rolecall", "trl")):
            if arm == "trl":
                arms[arm].append(trl_run(steps, prompts_per_step, group, max_new_tokens, seed=r,
                                         gradient_checkpointing=gradient_checkpointing))
            else:
                arms[arm].append(rolecall_run(steps, prompts_per_step, group, max_new_tokens, seed=r))
    ratio = [a["completions_per_s"] / b["completions_per_s"] for a, b in zip(arms["rolecall"], arms["trl"])]
    tok_ratio = [a["completion_tokens_per_s"] / b["completion_tokens_per_s"]
                 for a, b in zip(arms["rolecall"], arms["trl"]) if b["completion_tokens_per_s"]]
    import trl
    from trl import GRPOConfig

    effective = (GRPOConfig.__dataclass_fields__["gradient_checkpointing"].default
                 if gradient_checkpointing is None else gradient_checkpointing)
    return {"trl_version": trl.__version__, "gradient_checkpointing": effective,
            "gradient_checkpointing_source": "TRL default" if gradient_checkpointing is None else "set", "rounds": rounds, "steps_per_run": steps, "timed_steps_per_run": steps - 1,
            "prompts_per_step": prompts_per_step, "group_size": group, "max_new_tokens": max_new_tokens,
            "trl": arms["trl"], "rolecall": arms["rolecall"],
            "trl_throughput_ratio": median(ratio), "ratio_per_round": ratio,
            "completion_token_throughput_ratio": median(tok_ratio) if tok_ratio else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--json", help="also write the result to this file (TRL prints its logs to stdout)")
    a = ap.parse_args()
    torch.set_num_threads(2)
    doc = json.dumps(compare(a.rounds, a.steps, a.prompts, 8, a.max_new_tokens), indent=2)
    print(doc)
    if a.json:
        with open(a.json, "w") as f:
            f.write(doc + "\n")


if __name__ == "__main__":
    main()
