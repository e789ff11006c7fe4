"""Meta-policy training: the supervised bootstrap, the SoftRankPO objective and a resumable fit loop.

From "Learning to Deliberate: Meta-policy Collaboration for Agentic LLMs with Multi-agent
Reinforcement Learning" (MPDF): the policy is first fitted to oracle actions (π_sft, which
also serves as the frozen reference π_ref), then fine-tuned on an offline corpus holding the
reward of every action at each state. SoftRankPO turns those K rewards into rank-based
advantages A (eq. 2) and fits the implicit reward R_θ = β·log(π_θ/π_ref) to them (eq. 4):

    L_SR = E_s[ (1/K) Σ_i (R_θ(s,a_i) - mean R_θ(s,·) - A_i(s) + mean A(s))² ] - λ·E_s[H(π_θ(·|s))]

whose unique minimiser for λ = 0 is π*(a|s) ∝ π_ref(a|s)·exp(A(s,a)/β) (Theorem 2).
"""
from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from rolecall.advantages.softrank import softrank
from rolecall.metapolicy.corpus import Corpus
from rolecall.metapolicy.state import ACTIONS

LossFn = Callable[[nn.Module, Corpus], tuple[torch.Tensor, dict[str, float]]]
# Called after every optimizer step with (step, policy, optimizer, metrics); True stops training.
OnStep = Callable[[int, nn.Module, torch.optim.Optimizer, dict[str, float]], bool | None]


def _forward(policy: nn.Module, batch: Corpus) -> torch.Tensor:
    return policy(batch.own_B_D, batch.peers_B_P_D, batch.peer_mask_B_P)


def _prob_metrics(probs_B_A: torch.Tensor) -> dict[str, float]:
    names = ACTIONS if probs_B_A.shape[-1] == len(ACTIONS) else [str(a) for a in range(probs_B_A.shape[-1])]
    return {f"prob_{name}": float(p) for name, p in zip(names, probs_B_A.detach().mean(0))}


def sft_loss(policy: nn.Module, batch: Corpus) -> tuple[torch.Tensor, dict[str, float]]:
    """Cross-entropy on the oracle actions `batch.labels_B` (the supervised bootstrap)."""
    if batch.labels_B is None:
        raise ValueError("sft_loss needs a corpus with labels_B")
    logits_B_A = _forward(policy, batch)
    loss = F.cross_entropy(logits_B_A, batch.labels_B)
    accuracy = (logits_B_A.argmax(-1) == batch.labels_B).float().mean()
    return loss, {"loss": loss.item(), "accuracy": float(accuracy), **_prob_metrics(logits_B_A.softmax(-1))}


def softrank_advantages(rewards_B_A: torch.Tensor, tau: float = 0.5) -> torch.Tensor:
    """SoftRank advantages row by row (eq. 2), exactly rolecall's `softrank` on each state's K rewards."""
    if rewards_B_A.dim() != 2 or rewards_B_A.shape[1] < 2:
        raise ValueError(f"need rewards of at least 2 actions per state; got shape {tuple(rewards_B_A.shape)}")
    rows = [softrank([float(r) for r in row], tau) for row in rewards_B_A.detach().cpu().double()]
    return torch.tensor(rows, dtype=rewards_B_A.dtype, device=rewards_B_A.device).reshape(rewards_B_A.shape)


def softrank_loss(policy: nn.Module, ref_policy: nn.Module, batch: Corpus, tau: float = 0.5,
                  beta: float = 0.1, lam: float = 0.01) -> tuple[torch.Tensor, dict[str, float]]:
    """SoftRankPO's rank-matching loss (eq. 4) minus λ times the mean policy entropy.

    `ref_policy` is π_ref: evaluated without a graph, so it stays frozen whatever its flags.
    """
    if batch.rewards_B_A is None:
        raise ValueError("softrank_loss needs a corpus with rewards_B_A (the reward of every action)")
    if tau <= 0 or beta <= 0 or lam < 0:
        raise ValueError(f"need tau > 0, beta > 0 and lam >= 0; got tau={tau}, beta={beta}, lam={lam}")
    logp_B_A = _forward(policy, batch).log_softmax(-1)
    with torch.no_grad():
        ref_logp_B_A = _forward(ref_policy, batch).log_softmax(-1)
    adv_B_A = softrank_advantages(batch.rewards_B_A, tau)

    implicit_B_A = beta * (logp_B_A - ref_logp_B_A)
    gap_B_A = (implicit_B_A - implicit_B_A.mean(-1, keepdim=True)) - (adv_B_A - adv_B_A.mean(-1, keepdim=True))
    rank_loss = gap_B_A.pow(2).mean(-1).mean()
    probs_B_A = logp_B_A.exp()
    entropy = -(probs_B_A * logp_B_A).sum(-1).mean()
    loss = rank_loss - lam * entropy
    kl_ref = (probs_B_A * (logp_B_A - ref_logp_B_A)).sum(-1).mean()
    parts = {"loss": loss, "rank_loss": rank_loss, "entropy_bonus": lam * entropy, "entropy": entropy, "kl_ref": kl_ref}
    return loss, {**{k: v.item() for k, v in parts.items()}, **_prob_metrics(probs_B_A)}


def softrank_objective(ref_policy: nn.Module, tau: float = 0.5, beta: float = 0.1, lam: float = 0.01) -> LossFn:
    """`softrank_loss` with its reference and hyperparameters bound, in the shape `fit` calls."""
    return lambda policy, batch: softrank_loss(policy, ref_policy, batch, tau, beta, lam)


def make_optimizer(policy: nn.Module, lr: float) -> torch.optim.Optimizer:
    return torch.optim.AdamW(policy.parameters(), lr=lr)


def epoch_order(n: int, seed: int, epoch: int) -> torch.Tensor:
    """The row order of `epoch`: a pure function of (seed, epoch), so a resumed run replays it."""
    mixed = int.from_bytes(hashlib.sha256(f"{seed}:{epoch}".encode()).digest()[:8], "little") >> 1
    return torch.randperm(n, generator=torch.Generator().manual_seed(mixed))


@dataclass
class FitResult:
    step: int  # optimizer steps taken in total, counting those before `start_step`
    optimizer: torch.optim.Optimizer
    history: list[dict[str, float]] = field(default_factory=list)  # metrics of each step run here


def fit(policy: nn.Module, loss_fn: LossFn, data: Corpus, *, epochs: int, batch_size: int, lr: float,
        seed: int, start_step: int = 0, on_step: OnStep | None = None,
        state: dict | None = None) -> FitResult:
    """AdamW over `epochs` seeded shuffles of `data`, from `start_step` (batches are never dropped).

    To resume, load the policy weights and pass the saved optimizer state as `state` with the
    saved step: batch k of epoch e is the same in every run, so the result is bit-identical
    to never having stopped.
    """
    if epochs < 0 or batch_size < 1 or len(data) == 0:
        raise ValueError(f"need epochs >= 0, batch_size >= 1 and a non-empty corpus; "
                         f"got epochs={epochs}, batch_size={batch_size}, {len(data)} rows")
    per_epoch = math.ceil(len(data) / batch_size)
    total = epochs * per_epoch
    if not 0 <= start_step <= total:
        raise ValueError(f"start_step {start_step} is outside this run's 0..{total} steps")
    optimizer = make_optimizer(policy, lr)
    if state is not None:
        optimizer.load_state_dict(state)
    policy.train()
    result = FitResult(start_step, optimizer)
    order_epoch, order = -1, torch.empty(0, dtype=torch.long)
    while result.step < total:
        epoch, offset = divmod(result.step, per_epoch)
        if epoch != order_epoch:
            order_epoch, order = epoch, epoch_order(len(data), seed, epoch)
        loss, metrics = loss_fn(policy, data.take(order[offset * batch_size:(offset + 1) * batch_size]))
        if not torch.isfinite(loss):
            raise FloatingPointError(f"meta-policy loss is {loss.item()} at step {result.step}")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        result.step += 1
        result.history.append(metrics)
        if on_step is not None and on_step(result.step, policy, optimizer, metrics):
            break
    return result
