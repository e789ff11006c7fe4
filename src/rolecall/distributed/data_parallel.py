"""Data-parallel training over torch.distributed (gloo on CPU; NCCL on GPUs).

Launched by `torchrun --nproc-per-node N -m rolecall train ...`, every rank holds the same
adapters. Each rank plays a contiguous share of a step's problems (sampling is seeded per
request, so the episodes are those one process would play) and scores them; the scored
episodes are gathered, so every rank then holds the same rows. In each mini-batch a rank runs
only its share of the rows (contiguous in prompt order), with the whole mini-batch's loss
normaliser; the gradients are then summed across ranks before clipping and the optimizer step.
The no-grad passes (π_old, the base model's log-probs) are shared out the same way and their
results gathered. The sum is the gradient one process computes over all the rows,
so every rank takes the same step and the adapters stay identical (equal to a single process
up to floating-point summation order; tested).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

import torch

from rolecall.algo.ranks import share_bounds


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

    @staticmethod
    def from_env(device: str = "auto") -> "DataParallel | None":
        """Join the process group a launcher (torchrun) describes in the environment (WORLD_SIZE,
        RANK, MASTER_ADDR/PORT), once; None for a single process. NCCL when the run is on CUDA,
        else gloo. On CUDA each rank takes the GPU of its LOCAL_RANK."""
        import torch.distributed as dist

        if not dist.is_initialized() and int(os.environ.get("WORLD_SIZE", "1")) > 1:
            cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
            if cuda:  # a launcher that hides the other GPUs (CUDA_VISIBLE_DEVICES per rank) leaves one
                torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % max(1, torch.cuda.device_count()))
            dist.init_process_group("nccl" if cuda else "gloo")
        return DataParallel.current()

    @property
    def lead(self) -> bool:
        """Rank 0 writes the run directory; the other ranks only compute."""
        return self.rank == 0

    def share(self, n: int) -> tuple[int, int]:
        """This rank's contiguous slice [start, end) of n items (shares differ by at most one)."""
        return share_bounds(n, self.rank, self.world)

    def gather(self, items: list) -> list:
        """Every rank's list, concatenated in rank order, on every rank (pickled Python objects)."""
        import torch.distributed as dist

        parts: list[Any] = [None] * self.world
        dist.all_gather_object(parts, items)
        return [x for part in parts for x in part]

    def per_row(self, rows: list, compute: Callable[[list], dict[int, torch.Tensor]],
                device: torch.device) -> dict[int, torch.Tensor]:
        """`compute(rows) -> {id(row): tensor}` (a no-grad pass: π_old, the base model's
        log-probs) over this rank's contiguous share of `rows` only, then every rank's results
        gathered, so each rank holds a tensor for every row while doing 1/world of the work."""
        start, end = self.share(len(rows))
        pos = {id(r): i for i, r in enumerate(rows)}
        mine = {pos[k]: v.detach().cpu() for k, v in compute(rows[start:end]).items()}  # pickled: on the CPU
        out: dict[int, torch.Tensor] = {}
        for part in self.gather([mine]):  # one dict per rank
            for i, v in part.items():
                out[id(rows[i])] = v.to(device)
        return out

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank."""
        import torch.distributed as dist

        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    @staticmethod
    def device() -> torch.device:
        """Where collectives take their tensors: NCCL only moves CUDA tensors, gloo CPU ones."""
        import torch.distributed as dist

        if dist.get_backend() == "nccl":
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")

    def any_true(self, flag: bool) -> bool:
        return not self.all_true(not flag)

    def sum_grads(self, params: list[torch.nn.Parameter]) -> None:
        """Sum each parameter's gradient across ranks (a rank that produced none contributes zeros)."""
        import torch.distributed as dist

        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        flat = torch.cat([p.grad.reshape(-1) for p in params]) if params else torch.zeros(0, device=self.device())
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        offset = 0
        for p in params:
            n = p.numel()
            p.grad.copy_(flat[offset:offset + n].view_as(p.grad))
            offset += n

    def sum_float(self, value: float) -> float:
        import torch.distributed as dist

        t = torch.tensor([value], dtype=torch.float64, device=self.device())
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return float(t)

    def all_true(self, flag: bool) -> bool:
        import torch.distributed as dist

        t = torch.tensor([1 if flag else 0], dtype=torch.int64, device=self.device())
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        return bool(t)
