"""Data-parallel updates over torch.distributed (gloo on CPU; NCCL on GPUs).

Every rank holds the same rows (the step's episodes) and the same adapters. In each
mini-batch a rank runs only its share of the micro-batches, in a fixed order, with the whole
mini-batch's loss normaliser; the gradients are then summed across ranks before clipping and
the optimizer step. The sum is the gradient one process computes over all the micro-batches,
so every rank takes the same step and the adapters stay identical (equal to a single process
up to floating-point summation order; tested).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DataParallel:
    rank: int
    world: int

    @staticmethod
    def current() -> "DataParallel | None":
        """The initialised process group, if there is one with more than one rank."""
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            return DataParallel(dist.get_rank(), dist.get_world_size())
        return None

    def owns(self, index: int) -> bool:
        """Whether micro-batch `index` (counted in the same order on every rank) is this rank's."""
        return index % self.world == self.rank

    def sum_grads(self, params: list[torch.nn.Parameter]) -> None:
        """Sum each parameter's gradient across ranks (a rank that produced none contributes zeros)."""
        import torch.distributed as dist

        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        flat = torch.cat([p.grad.reshape(-1) for p in params]) if params else torch.zeros(0)
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        offset = 0
        for p in params:
            n = p.numel()
            p.grad.copy_(flat[offset:offset + n].view_as(p.grad))
            offset += n

    def sum_float(self, value: float) -> float:
        import torch.distributed as dist

        t = torch.tensor([value], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return float(t)

    def all_true(self, flag: bool) -> bool:
        import torch.distributed as dist

        t = torch.tensor([1 if flag else 0], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        return bool(t)
