"""One rank of the data-parallel test (tests/test_data_parallel.py): a training step under gloo."""
from __future__ import annotations

import os
import sys


def run(rank: int, world: int, init_file: str, model_dir: str, here: str, out: str) -> None:
    import torch
    import torch.distributed as dist

    sys.path.insert(0, os.path.dirname(__file__))
    os.chdir(here)  # the reward module sits there
    torch.set_num_threads(1)
    if world > 1:
        dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        from peft import get_peft_model_state_dict

        from dp_common import config
        from rolecall.algo import update
        from rolecall.train.stack import build_stack
        from rolecall.train.step import train_step
        from rolecall.algo.role_stats import flat_grad

        grads = []  # each optimizer step's gradient, as the step sees it (after the sum across ranks)
        real_step = update._step

        def recording_step(popt, *args, **kw):
            grads.append(flat_grad(popt.params).clone())
            return real_step(popt, *args, **kw)

        update._step = recording_step

        stack = build_stack(config(model_dir))
        try:
            row, _ = train_step(stack, 1)
        finally:
            stack.close()
        state = {p: get_peft_model_state_dict(stack.model, adapter_name=p) for p in stack.routing.trainable}
        torch.save({"state": state, "grads": grads, "reward": row["reward/mean"]}, f"{out}/rank{rank}.pt")
    finally:
        if world > 1:
            dist.destroy_process_group()
