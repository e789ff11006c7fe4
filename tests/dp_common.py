"""The run both arms of the data-parallel test train: voting on the tiny model, rewards that vary."""
from __future__ import annotations

# The tiny random model fills its whole budget, so a reward of the text's characters, not its length.
VARIED_REWARD = "def reward(problem, answer):\n    return sum(map(ord, answer)) % 3 / 2\n"


def config(model_dir: str):
    import rolecall

    return rolecall.make_config({
        "model": {"path": model_dir}, "task": {"n_val": 4}, "reward": {"name": "varied_reward:reward"},
        "optim": {"lr": 0.05}, "algo": {"micro_batch_tokens": 64},  # several micro-batches to deal out
        "rollout": {"problems_per_step": 2, "group_size": 4, "max_new_tokens": 6, "request_seeds": True},
        "train": {"threads": 1, "diagnostics": "basic"}})
