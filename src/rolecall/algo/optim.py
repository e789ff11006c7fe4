"""Each trainable policy's optimizer, learning-rate schedule and gradient history.

Every policy has its own AdamW, so a policy that is not stepped is not touched at all: one
optimizer over several adapters with stale zero gradients would still move the idle ones
through weight decay and momentum.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rolecall.schema import OptimCfg
from rolecall.policies.model import adapter_params


class LrSchedule:
    """Linear warmup over the optimizer steps a policy has taken, then cosine over the run.

    The cosine follows the run's progress (which iteration, and which mini-batch within it)
    rather than a step count planned up front: how many optimizer steps a policy takes per
    iteration follows the rows it receives (three for a role with three slots, one for a
    single slot, a varying number in a workflow whose rounds end early), and every policy still reaches the end of
    its decay at the run's last step. `taken` counts optimizer steps really applied, so a
    skipped (non-finite) update spends no warmup step.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, cfg: OptimCfg) -> None:
        self.optimizer, self.cfg = optimizer, cfg
        self.taken = 0
        self.lr = cfg.lr

    def factor(self, progress: float) -> float:
        warm = (self.taken + 1) / (self.cfg.warmup_steps + 1) if self.taken < self.cfg.warmup_steps else 1.0
        if self.cfg.schedule == "constant":
            return warm
        return warm * 0.5 * (1.0 + math.cos(math.pi * min(1.0, max(0.0, progress))))

    def at(self, progress: float) -> float:
        """The learning rate the next optimizer step would take at `progress`; nothing is set."""
        return self.cfg.lr * self.factor(progress)

    def set(self, progress: float) -> float:
        """Set the learning rate of the next optimizer step, `progress` in [0, 1) of the run."""
        self.lr = self.at(progress)
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr
        return self.lr

    def step(self) -> None:
        self.taken += 1

    def state_dict(self) -> dict:
        return {"taken": self.taken}

    def load_state_dict(self, state: dict) -> None:
        # `last_epoch`: checkpoints written with a LambdaLR, which counted the same steps.
        self.taken = int(state.get("taken", state.get("last_epoch", 0)))


@dataclass
class PolicyOptim:
    params: list[torch.nn.Parameter]
    optimizer: torch.optim.Optimizer
    schedule: LrSchedule
    grad_ema: torch.Tensor | None = None  # the gradient-coherence regularizer's history (flat)
    grad_clip: float = 1.0  # max gradient norm of this adapter

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.schedule.state_dict(),
                "grad_ema": self.grad_ema}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.schedule.load_state_dict(state["scheduler"])
        ema = state.get("grad_ema")
        self.grad_ema = None if ema is None else ema.to(self.params[0].device)


def build_optimizers(model, trainable: tuple[str, ...], cfg: OptimCfg,
                     per_policy: dict[str, OptimCfg] | None = None) -> dict[str, PolicyOptim]:
    """One AdamW per trainable policy, with `per_policy[name]` replacing `cfg` where given."""
    out = {}
    for name in trainable:
        cfg_p = (per_policy or {}).get(name, cfg)
        params = list(adapter_params(model, name).values())
        # The fused kernel (CPU and CUDA): one call per step instead of a loop over LoRA tensors.
        fused = all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in params)
        opt = torch.optim.AdamW(params, lr=cfg_p.lr, weight_decay=cfg_p.weight_decay, fused=fused or None)
        out[name] = PolicyOptim(params, opt, LrSchedule(opt, cfg_p), grad_clip=cfg_p.grad_clip)
    return out
