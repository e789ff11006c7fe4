"""Data-parallel updates with torch.distributed (gloo, 2 processes) equal one process's update."""
from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.multiprocessing as mp


sys.path.insert(0, str(Path(__file__).parent))
import dp_worker  # noqa: E402
from dp_common import VARIED_REWARD  # noqa: E402


def test_two_gloo_processes_take_the_step_one_process_takes(tiny_model_dir, tmp_path):
    (tmp_path / "varied_reward.py").write_text(VARIED_REWARD)
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    dp_worker.run(0, 1, "", str(tiny_model_dir), str(tmp_path), str(one))
    mp.spawn(dp_worker.run, args=(2, str(tmp_path / "init"), str(tiny_model_dir), str(tmp_path), str(two)),
             nprocs=2, join=True)
    single = torch.load(one / "rank0.pt", weights_only=True)
    ranks = [torch.load(two / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    assert ranks[0]["reward"] == ranks[1]["reward"] == single["reward"]  # the same episodes everywhere
    # Each optimizer step saw the gradient one process computes over the whole mini-batch
    # (summed across ranks; equal up to the order of floating-point sums).
    assert len(single["grads"]) == len(ranks[0]["grads"]) == len(ranks[1]["grads"]) > 0
    for g1, g2a, g2b in zip(single["grads"], ranks[0]["grads"], ranks[1]["grads"]):
        assert torch.equal(g2a, g2b)
        rel = float((g2a - g1).norm() / g1.norm())
        assert g1.norm() > 0 and rel < 1e-5, f"relative gradient difference {rel:.2e}"
    # and every rank took the same step: the adapters stay identical across ranks
    for policy, state in single["state"].items():
        for k in state:
            assert torch.equal(ranks[0]["state"][policy][k], ranks[1]["state"][policy][k]), f"ranks disagree on {k}"
