"""Speed benchmark 2 of `benchmarks/run.py`: two cooperating roles, rolecall vs CoMLRL's MAGRPO, on the same work.

The work of one step, as CoMLRL's MAGRPO does it (benchmarks/results/comlrl_notes.md):
one 2-digit addition problem; two agents answer it independently, 8 samples each, at most
32 new tokens, temperature 0.6; agent 0 with the `generator` prompt, agent 1 with the
`worker` prompt and the strategy "Add the ones, then the tens."; sample j of one agent is
paired with sample j of the other and the pair scores 1 if either last `\\boxed{}` is the
sum; advantages are that joint reward normalised over the 8 pairs; each agent takes one
update. 16 completions per step.

CoMLRL does it with one full model copy per agent and full-weight REINFORCE; rolecall does
it with one shared base and one LoRA per role (r 16, alpha 32, Isolated-Policy) and its
PPO-clip update. The pairing and joint reward are a two-role workflow and a verifier
defined here, through rolecall's public extension points (a `module:Class` workflow and
the `Verifier` protocol). CoMLRL's sampler also applies top-p 0.6 / top-k 50, which
rolecall's engine does not (negligible cost; completion tokens are reported so length
differences are visible). The arms alternate; CoMLRL runs in its own venv
(`benchmarks/comlrl_setup.sh`) through `benchmarks/comlrl_arm.py`.
"""
from __future__ import annotations

import asyncio
import time
from statistics import fmean, median

from rolecall.rewards.base import Score
from rolecall.rewards.math import grade_math
from rolecall.types import Problem
from rolecall.workflows.base import Team, Workflow, user

STRATEGY = "Add the ones, then the tens."
_SEP = "\n\u241e\n"  # joins the pair's answers into one final answer for the verifier


class CooperativePair(Workflow):
    """Two roles answer the same problem independently (one wave); the pair is the answer."""

    name = "cooperative_pair"
    roles = ("generator", "worker")

    async def run(self, problem: Problem, team: Team) -> str:
        a, b = await asyncio.gather(
            team.call("generator", [user(self.render("generator", problem=problem.prompt))]),
            team.call("worker", [user(self.render("worker", problem=problem.prompt, strategy=STRATEGY))]))
        return a + _SEP + b


class EitherCorrect:
    """Joint reward of the pair: 1 if either answer's last box equals the gold answer."""

    name = "either_correct"

    def score_many(self, completions: list[str], problems: list[Problem]) -> list[Score]:
        out = []
        for text, p in zip(completions, problems, strict=True):
            ok = any(grade_math(part, p.answer, checker="strict").value == 1.0 for part in text.split(_SEP))
            out.append(Score(1.0 if ok else 0.0, "ok" if ok else "wrong"))
        return out

    def close(self) -> None:
        pass


class DigitShare:
    """Joint reward of the compute-size work: the pair's mean digit share (as comlrl_arm's)."""

    name = "digit_share"

    def score_many(self, completions: list[str], problems: list[Problem]) -> list[Score]:
        from benchmarks.comlrl_arm import digit_share

        return [Score(fmean(digit_share(part) for part in text.split(_SEP)), "ok") for text in completions]

    def close(self) -> None:
        pass


def rolecall_run(steps: int, group: int = 8, max_new_tokens: int = 32, seed: int = 0, warmup: int = 1,
                 after_warmup=None, extra: tuple[str, ...] = ("task.ops=+",), verifier=None) -> dict:
    """`extra` overrides say what to train on (default: the 2-digit additions); `verifier`
    replaces EitherCorrect."""
    from rolecall.config import load_config
    from rolecall.train.stack import build_stack
    from rolecall.train.step import train_step

    cfg = load_config(None, ["workflow.name=benchmarks.comlrl_compare:CooperativePair",
                             "rollout.problems_per_step=1", f"rollout.group_size={group}",
                             f"rollout.max_new_tokens={max_new_tokens}", "rollout.temperature=0.6",
                             f"train.seed={seed}", "train.threads=2", *extra])
    stack = build_stack(cfg)
    stack.verifier.close()
    stack.verifier = verifier or EitherCorrect()
    times, tokens = [], []
    for step in range(1, warmup + steps + 1):
        if step == warmup + 1 and after_warmup is not None:
            after_warmup()
        t0 = time.perf_counter()
        _, eps = train_step(stack, step)
        if step > warmup:
            times.append(time.perf_counter() - t0)
            tokens.append(sum(len(t.completion_ids) for e in eps for t in e.turns))
    completions = 2 * group
    return {"s_per_step": fmean(times), "completions_per_s": completions / fmean(times),
            "completion_tokens_per_s": fmean(tokens) / fmean(times), "mean_completion_tokens": fmean(tokens) / completions,
            "step_s": times}


def phase_targets() -> list[tuple[object, str, str]]:
    """(owner, attribute, phase) of each function `rolecall_phases` times; a test checks they
    still exist, so a rename in the trainer fails there, not in the middle of a benchmark run."""
    import torch

    import rolecall.algo.update as update
    import rolecall.engines.hf as hf

    return [(hf.HFEngine, "_prefill", "prefill"), (hf.HFEngine, "_decode", "decode"),
            (update, "_forward", "train_forward"), (torch.Tensor, "backward", "train_backward"),
            (update, "base_logps", "kl_ref_base_pass")]


def rolecall_phases(steps: int = 10, seed: int = 0) -> dict:
    """Where a rolecall step of this task goes: wall milliseconds per step in each phase.

    perf_counter around the engine's prefill and decode loop, the trainer's forward and
    backward, and the kl_ref base-model pass; `other` is the rest of the step (rendering,
    scoring, advantages, optimizer, metrics). Timers only, no profiler overhead.
    """
    from contextlib import ExitStack
    from unittest import mock

    spent: dict[str, float] = {}

    def timed(key, fn):
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[key] = spent.get(key, 0.0) + time.perf_counter() - t0
        return wrapper

    with ExitStack() as stack:
        for obj, name, key in phase_targets():
            stack.enter_context(mock.patch.object(obj, name, timed(key, getattr(obj, name))))
        run = rolecall_run(steps, seed=seed, after_warmup=spent.clear)
    ms = {k: 1000 * v / steps for k, v in spent.items()}
    ms["other"] = 1000 * run["s_per_step"] - sum(ms.values())
    return {"steps": steps, "s_per_step": run["s_per_step"], "ms_per_step": ms}


def compare(rounds: int = 5, steps: int = 10) -> dict:
    """Alternating runs; the ratio is rolecall's completions/s over CoMLRL's, median over rounds."""
    from benchmarks.comlrl_arm import ensure_venv, run_arm

    python = ensure_venv()
    arms: dict[str, list[dict]] = {"comlrl": [], "rolecall": []}
    for r in range(rounds):
        for arm in (("comlrl", "rolecall") if r % 2 == 0 else ("rolecall", "comlrl")):
            if arm == "comlrl":
                arms[arm].append(run_arm(python, steps=steps, threads=2, seed=r))
            else:
                arms[arm].append(rolecall_run(steps, seed=r))
    ratio = [a["completions_per_s"] / b["completions_per_s"] for a, b in zip(arms["rolecall"], arms["comlrl"])]
    return {"rounds": rounds, "timed_steps_per_run": steps, "agents": 2, "group_size": 8, "max_new_tokens": 32,
            "comlrl": arms["comlrl"], "rolecall": arms["rolecall"], "ratio_per_round": ratio,
            "comlrl_throughput_ratio": median(ratio), "rolecall_phases": rolecall_phases()}


if __name__ == "__main__":
    import json

    import torch

    torch.set_num_threads(2)
    print(json.dumps(compare(), indent=2))
