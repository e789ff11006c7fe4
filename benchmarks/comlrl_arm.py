"""CoMLRL arm of the "multi-agent GRPO vs CoMLRL" throughput comparison (benchmarks/run.py).

Runs CoMLRL 1.4.3's MAGRPO trainer, unmodified, on this project's embedded tiny model
(src/rolecall/basemodel/embedded, a ~1.6M-parameter Qwen3 checkpoint) and prints one JSON
line with the measured step time and completion throughput. Run it with the python of the
CoMLRL venv (`bash benchmarks/comlrl_setup.sh` makes it and prints that path):

    benchmarks/.venv-comlrl/bin/python benchmarks/comlrl_arm.py --steps 20

It never imports rolecall (rolecall is not installed in that venv). The setup can also be
driven from python with `ensure_venv()` below, which only uses the standard library:

    from benchmarks.comlrl_arm import ensure_venv, run_arm
    result = run_arm(ensure_venv(), steps=20)   # dict parsed from the JSON line

The workload (mirror it exactly on the rolecall side; benchmarks/results/comlrl_notes.md
explains each point):
  * 2 agents ("roles"), each its own full model copy loaded from the embedded checkpoint
    by CoMLRL itself (AutoModelForCausalLM, sdpa), full-weight training (CoMLRL has no
    LoRA), one AdamW per agent, lr 5e-6 (CoMLRL default).
  * single turn, joint_mode "aligned": per step one prompt; each agent samples
    num_generations=8 completions from its own role prompt, independently (neither sees
    the other's output); completion j of agent 0 is paired with completion j of agent 1
    and the pair gets one joint reward, which both agents train on.
  * role prompts (ChatML via the checkpoint's chat template, one user message):
      agent 0 (generator): "Solve. Put the final answer in \\boxed{}.\\n{a}+{b}"
      agent 1 (worker):    "Solve with this strategy: Add the ones, then the tens.\\n"
                           "Answer in \\boxed{}.\\n{a}+{b}"
  * joint reward: 1.0 if at least one agent's last \\boxed{...} equals a+b, else 0.0.
  * sampling: CoMLRL's defaults temperature 0.6, top_p 0.6, top_k 50 (flags), HF
    generate with KV cache, max_new_tokens 32 (flag), stops at <|im_end|>.
  * rollout_buffer_size=1 and train_batch_size=1, so every prompt is one optimizer step
    per agent (CoMLRL's default buffers 2 prompts per update).
  * problems: benchmarks/run.py's PROMPTS, [f"{a}+{b}" for a in range(10, 99, 7) for b in
    range(11, 99, 9)], in order: step i (warm-up included) uses PROMPTS[i % 130].
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_MODEL = REPO / "src" / "rolecall" / "basemodel" / "embedded"
DEFAULT_VENV = HERE / ".venv-comlrl"
SETUP_SCRIPT = HERE / "comlrl_setup.sh"

GENERATOR_PROMPT = "Solve. Put the final answer in \\boxed{{}}.\n{problem}"
WORKER_PROMPT = ("Solve with this strategy: Add the ones, then the tens.\n"
                 "Answer in \\boxed{{}}.\n{problem}")
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


# ---------------------------------------------------------------- driver side (stdlib only)

def ensure_venv(venv: Path | str = DEFAULT_VENV) -> Path:
    """Create/complete the CoMLRL venv (idempotent, prints progress); return its python."""
    env = dict(os.environ, COMLRL_VENV=str(venv))
    out = subprocess.run(["bash", str(SETUP_SCRIPT)], env=env, check=True,
                         stdout=subprocess.PIPE, text=True)
    return Path(out.stdout.strip().splitlines()[-1])


def run_arm(python: Path | str, **flags) -> dict:
    """Run this script under the CoMLRL venv's python; return its JSON result.

    flags map to the CLI (steps=20, max_new_tokens=32, ...; underscores become dashes).
    """
    cmd = [str(python), str(Path(__file__).resolve())]
    for key, value in flags.items():
        if value is True:  # a switch
            cmd.append(f"--{key.replace('_', '-')}")
        elif value is not False:
            cmd += [f"--{key.replace('_', '-')}", str(value)]
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- benchmark side (CoMLRL venv)

# The same list as benchmarks/run.py's PROMPTS: step i uses PROMPTS[i % 130].
PROMPTS = [f"{a}+{b}" for a in range(10, 99, 7) for b in range(11, 99, 9)]


def problems(n: int) -> list[dict]:
    out = []
    for i in range(n):
        a, b = map(int, PROMPTS[i % len(PROMPTS)].split("+"))
        out.append({"prompt": f"{a}+{b}", "answer": str(a + b)})
    return out


# Compute-size work (benchmarks/compute_peers.py): long prompts of random characters, and a
# reward that varies from sample to sample on a random model (so every advantage is nonzero).
LONG_ALPHABET = "0123456789+-=abc "


def long_problems(n: int, chars: int) -> list[dict]:
    """n problems whose text is `chars` random characters (one token each in rolecall's
    character tokenizer), the same in every arm and run."""
    import random

    rng = random.Random(1234)
    return [{"prompt": "".join(rng.choice(LONG_ALPHABET) for _ in range(chars)), "answer": "0"} for _ in range(n)]


def digit_share(text: str) -> float:
    """The fraction of a completion's characters that are digits."""
    return sum(c.isdigit() for c in text) / max(len(text), 1)


def digit_reward(completions0, completions1, *, batch_items):
    """Joint reward of the compute-size work: the pair's mean digit share."""
    return [(digit_share(c0) + digit_share(c1)) / 2 for c0, c1 in zip(completions0, completions1)]


def last_boxed(text: str) -> str | None:
    found = _BOXED.findall(text)
    return found[-1].strip() if found else None


def joint_reward(completions0, completions1, *, batch_items):
    """CoMLRL reward signature: one list per agent, batch_items keyword-only.

    CoMLRL calls it once per aligned pair (each list holds one completion).
    """
    answer = batch_items[0]["answer"]
    return [1.0 if answer in (last_boxed(c0), last_boxed(c1)) else 0.0
            for c0, c1 in zip(completions0, completions1)]


def bench(args: argparse.Namespace, tmp: str) -> dict:
    for key, value in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                       "WANDB_MODE": "disabled", "WANDB_DISABLED": "true", "WANDB_SILENT": "true",
                       "WANDB_DIR": tmp, "HF_HOME": tmp, "HF_DATASETS_CACHE": tmp,
                       "TOKENIZERS_PARALLELISM": "false"}.items():
        os.environ[key] = value
    os.chdir(tmp)  # anything a library writes to the cwd lands in the temp dir

    import random

    import numpy as np
    import torch
    import transformers
    from datasets import Dataset
    from transformers import AutoTokenizer

    import comlrl
    from comlrl.trainers.reinforce import MAGRPOConfig, MAGRPOTrainer

    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()

    model_dir = str(Path(args.model).resolve())
    tok = AutoTokenizer.from_pretrained(model_dir)

    def render(template: str):
        def fmt(item: dict) -> str:
            msgs = [{"role": "user", "content": template.format(problem=item["prompt"])}]
            return tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        return fmt

    n_steps = args.warmup + args.steps
    # CoMLRL takes a prompt to end at its first pad token. Where the pad token is also the
    # end-of-turn token (SmolLM2's <|im_end|>) and the chat template writes a system turn,
    # that cuts the prompt after the system turn: every "completion" then starts with a pad,
    # is read as empty, scores 0 and trains on no tokens. Pad with a special token that no
    # prompt contains, so CoMLRL reads the prompt and the completion as they are.
    probe = tok(render(GENERATOR_PROMPT)({"prompt": "1+1"}))["input_ids"]
    if tok.pad_token_id in probe:
        free = [t for t in tok.all_special_tokens if tok.convert_tokens_to_ids(t) not in probe]
        if not free:
            raise RuntimeError("every special token occurs in the rendered prompt: no pad token CoMLRL can read")
        tok.pad_token = free[0]
    data = Dataset.from_list(long_problems(n_steps, args.problem_chars) if args.problem_chars else problems(n_steps))
    cfg = MAGRPOConfig(
        num_train_epochs=1,
        num_agents=2,
        num_generations=args.group_size,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        num_turns=1,
        joint_mode="aligned",
        rollout_buffer_size=1,
        train_batch_size=1,
        eval_interval=0,
        logging_steps=1,
        agent_learning_rate=args.lr,
    )
    trainer = MAGRPOTrainer(
        agent_model=model_dir,  # CoMLRL loads one full copy per agent
        num_agents=2,
        tokenizer=tok,
        train_dataset=data,
        reward_func=digit_reward if args.problem_chars else joint_reward,
        formatters=[render(GENERATOR_PROMPT), render(WORKER_PROMPT)],
        args=cfg,
        model_config={"torch_dtype": args.dtype},  # CoMLRL's own knob: the weights' (and so the optimizer's) dtype
    )
    trainer.verbose = False  # no tqdm bar; wandb_config=None already means no wandb
    if args.fixed_length:  # generate() reads the model's generation config under CoMLRL's own kwargs
        for agent in trainer.agents:
            agent.generation_config.min_new_tokens = args.max_new_tokens

    # Instrument the instance (no CoMLRL code changed): time steps, generation and updates,
    # count completions and generated tokens.
    steps: list[dict] = []
    cur: dict = {}
    orig_step, orig_gen, orig_update = (trainer._train_step_returns, trainer._generate_completions,
                                        trainer._update_from_samples)
    orig_reward = trainer.reward_func

    def timed_step(batch_item, **kw):
        cur.clear()
        cur.update(gen_s=0.0, update_s=0.0, completions=0, tokens=0, rewards=[], updates=0)
        t0, c0 = time.perf_counter(), time.process_time()
        out = orig_step(batch_item, **kw)
        cur["s"] = time.perf_counter() - t0
        cur["cpu_s"] = time.process_time() - c0
        steps.append(dict(cur))
        return out

    def timed_gen(*a, **kw):
        t0 = time.perf_counter()
        out = orig_gen(*a, **kw)
        cur["gen_s"] += time.perf_counter() - t0
        cur["completions"] += len(out["response_lens"])
        cur["tokens"] += sum(out["response_lens"])
        return out

    def timed_update(agent_idx, samples):
        t0 = time.perf_counter()
        out = orig_update(agent_idx, samples)
        cur["update_s"] += time.perf_counter() - t0
        cur["updates"] += 1
        return out

    def counted_reward(completions0, completions1, *, batch_items):  # same signature
        out = orig_reward(completions0, completions1, batch_items=batch_items)
        cur["rewards"].extend(out)
        return out

    trainer._train_step_returns = timed_step
    trainer._generate_completions = timed_gen
    trainer._update_from_samples = timed_update
    trainer.reward_func = counted_reward

    load_before = os.getloadavg()[0]
    t_train = time.perf_counter()
    trainer.train()
    train_wall = time.perf_counter() - t_train

    timed = steps[args.warmup:]
    if len(timed) != args.steps:
        raise RuntimeError(f"expected {args.steps} timed steps, got {len(timed)}")
    total_s = sum(s["s"] for s in timed)
    completions = sum(s["completions"] for s in timed)
    tokens = sum(s["tokens"] for s in timed)
    step_times = sorted(s["s"] for s in timed)
    rewards = [r for s in timed for r in s["rewards"]]
    return {
        "framework": "comlrl",
        "version": comlrl.__version__,
        "algorithm": "MAGRPO",
        "agents": 2,
        "group_size": args.group_size,
        "prompts_per_step": 1,
        "max_new_tokens": args.max_new_tokens,
        "fixed_length": args.fixed_length,
        "problem_chars": args.problem_chars,
        "steps": args.steps,
        "warmup_steps": args.warmup,
        "s_per_step": round(total_s / args.steps, 4),
        "s_per_step_median": round(step_times[len(step_times) // 2], 4),
        # CPU seconds of this process (all its threads) per step: with --threads 1 it is a
        # load-independent estimate of the uncontended wall time on a shared machine.
        "cpu_s_per_step": round(sum(s["cpu_s"] for s in timed) / args.steps, 4),
        "gen_s_per_step": round(sum(s["gen_s"] for s in timed) / args.steps, 4),
        "update_s_per_step": round(sum(s["update_s"] for s in timed) / args.steps, 4),
        "completions_per_step": completions / args.steps,
        "completions_per_s": round(completions / total_s, 2),
        "completion_tokens_per_s": round(tokens / total_s, 1),
        "mean_completion_tokens": round(tokens / max(completions, 1), 2),
        "optimizer_steps_per_step": sum(s["updates"] for s in timed) / args.steps,
        "mean_joint_reward": round(sum(rewards) / max(len(rewards), 1), 4),
        "train_wall_s": round(train_wall, 2),
        "lora": False,
        "dtype": args.dtype,
        "pad_token": tok.pad_token,
        "trained_params_per_agent": sum(p.numel() for p in trainer.agents[0].parameters()),
        "model_copies": len(trainer.agents),
        "temperature": args.temperature,
        "top_p": args.top_p,
        "top_k": args.top_k,
        "threads": args.threads,
        "loadavg_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],  # before, after
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "notes": ("MAGRPO single-turn aligned; full-weight AdamW per agent (CoMLRL has no LoRA); "
                  "one model copy per agent; agents answer independently; joint reward = any "
                  "agent boxed the right sum; rollout_buffer_size=1 -> 1 optimizer step per agent "
                  "per prompt; completion_tokens count up to and including <|im_end|>"),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=20, help="timed steps (1 prompt each)")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    p.add_argument("--group-size", type=int, default=8, help="num_generations per agent")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--temperature", type=float, default=0.6, help="CoMLRL default 0.6")
    p.add_argument("--top-p", type=float, default=0.6, help="CoMLRL default 0.6")
    p.add_argument("--top-k", type=int, default=50, help="CoMLRL default 50")
    p.add_argument("--lr", type=float, default=5e-6, help="CoMLRL default 5e-6")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0, help="torch/random/numpy seed (sampling)")
    p.add_argument("--model", default=str(DEFAULT_MODEL))
    p.add_argument("--problem-chars", type=int, default=0,
                   help="problems of this many random characters, rewarded by digit share (compute-size work)")
    p.add_argument("--fixed-length", action="store_true",
                   help="every completion exactly --max-new-tokens long (EOS suppressed until then)")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                   help="the agents' weights; bfloat16 trains them in bf16 (CoMLRL has no mixed precision)")
    args = p.parse_args(argv)
    if args.steps < 1 or args.warmup < 0:
        p.error("--steps must be >= 1 and --warmup >= 0")
    args.model = str(Path(args.model).resolve())  # before bench() changes directory
    cwd = os.getcwd()
    tmp = tempfile.mkdtemp(prefix="comlrl_arm_")
    try:
        result = bench(args, tmp)
    finally:
        os.chdir(cwd)
        shutil.rmtree(tmp, ignore_errors=True)
    sys.stdout.flush()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()


def problems_file(directory: Path, n: int, chars: int) -> Path:
    """`long_problems` as a JSONL dataset file (prompt, solution) that every arm reads."""
    path = directory / "problems.jsonl"
    with path.open("w") as f:
        for row in long_problems(n, chars):
            f.write(json.dumps({"prompt": row["prompt"], "solution": row["answer"]}) + "\n")
    return path


def dataset_overrides(model_dir: Path, data: Path, lora_r: int = 16) -> list[str]:
    """rolecall's overrides for training on that file with every turn at its full budget."""
    return [f"model.path={model_dir}", "task.name=dataset", f"data.path={data}", "data.test_rows=1",
            "rollout.ignore_eos=true", f"lora.r={lora_r}", f"lora.alpha={2 * lora_r}"]
