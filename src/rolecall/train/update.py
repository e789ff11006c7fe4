"""The update stage: PPO-clip steps for each policy on its own tokens, with per-role statistics.

Policies whose adapters the LoRA router can mix share every forward and backward pass (a
row mask keeps each adapter's gradient to its own rows); the rest train one after another.
Each trainable policy has its own AdamW and scheduler, so a policy that is not stepped
is not touched at all (a shared optimizer with stale zero grads would still apply decay
and momentum). Mini-batches are split into token-budgeted micro-batches with gradient
accumulation normalised by the whole mini-batch, so memory is bounded and the gradient
is the same whatever the split.

A mini-batch whose loss or gradient norm is NaN/Inf is skipped whole: no optimizer step,
no scheduler step, its gradients discarded, so weights, AdamW moments and the learning-rate
schedule are bit-identical to before it. The schedule counts optimizer steps taken
(`build_stack` sizes it as steps x mini_batches x ppo_epochs), so a skipped update does not
spend a warmup or decay step either. Skips are counted per source (`nonfinite_loss`,
`nonfinite_grad`) for the trainer's halt rule.
"""
from __future__ import annotations

import math
import random
from collections import defaultdict
from dataclasses import dataclass, replace
from statistics import fmean

import torch

from rolecall.config import AlgoCfg, OptimCfg
from rolecall.loss import ppo_clip_loss, token_logprobs, token_logprobs_and_entropy
from rolecall.policies.lora_router import router_for
from rolecall.policies.model import adapter_params, set_training
from rolecall.policies.routing import BASE_POLICY
from rolecall.train.batch import Row, collate, micro_batches
from rolecall.train.forward import completion_logits

_CLAMP = 20.0  # log-ratio clamp of every importance-ratio diagnostic (as the paper's code)


@dataclass
class PolicyOptim:
    params: list[torch.nn.Parameter]
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR


def lr_lambda(cfg: OptimCfg, total: int):
    def f(step: int) -> float:
        if step < cfg.warmup_steps:
            return (step + 1) / (cfg.warmup_steps + 1)
        if cfg.schedule == "constant":
            return 1.0
        done = min(1.0, (step - cfg.warmup_steps) / max(1, total - cfg.warmup_steps))
        return 0.5 * (1.0 + math.cos(math.pi * done))
    return f


def build_optimizers(model, trainable: tuple[str, ...], cfg: OptimCfg, total_steps: int) -> dict[str, PolicyOptim]:
    out = {}
    for name in trainable:
        params = list(adapter_params(model, name).values())
        # The fused kernel (CPU and CUDA): one call per step instead of a loop over LoRA tensors.
        fused = all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in params)
        opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, fused=fused or None)
        out[name] = PolicyOptim(params, opt, torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(cfg, total_steps)))
    return out


class _RoleStats:
    """Sums per role, turned into means at the end (token-weighted or sequence-weighted)."""

    def __init__(self) -> None:
        self.s: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))

    def add(self, role: str, **vals: float) -> None:
        for k, v in vals.items():
            self.s[role][k] += v

    def result(self) -> dict[str, dict[str, float]]:
        out = {}
        for role, s in self.s.items():
            tok, seq, steps = max(s["tokens"], 1.0), max(s["seqs"], 1.0), max(s["opt_steps"], 1.0)
            out[role] = {"loss": s["loss"] / seq, "chi2_token": s["ratio2"] / tok - 1.0,
                         "chi2_seq": s["seq_ratio2"] / seq - 1.0,
                         "training_ppl": s["ppl"] / seq, "rollout_ppl": s["rollout_ppl"] / seq,
                         "kl": s["kl"] / tok, "k3_kl": s["k3_kl"] / tok,
                         "entropy": s["entropy"] / tok, "clip_frac": s["clipped"] / tok, "tokens": s["tokens"]}
            if s["kl_ref_tokens"]:
                out[role]["kl_ref"] = s["kl_ref"] / s["kl_ref_tokens"]
            if s["opt_steps"]:
                out[role]["grad_norm"] = s["grad_norm"] / steps
                out[role]["grad_share"] = s["grad_share"] / steps
        return out


def _forward(model, batch: dict, temperature: float, route=None) -> tuple[torch.Tensor, torch.Tensor]:
    return token_logprobs_and_entropy(completion_logits(model, batch, route), batch["targets"], temperature)


def _ref_logps(model, rows: list[Row], pad_id: int, temperature: float, max_tokens: int) -> dict[int, torch.Tensor]:
    """Log-probs of these rows' completion tokens under the base model (every adapter off), for
    kl_ref, by id(row). The base is the same for every policy: one pass over all of them."""
    out: dict[int, torch.Tensor] = {}
    with torch.inference_mode(), router_for(model).policy(BASE_POLICY):
        for mb in micro_batches(rows, max_tokens):
            b = collate(mb, pad_id, model.device)
            for r, x in zip(mb, token_logprobs(completion_logits(model, b), b["targets"], temperature)):
                out[id(r)] = x[: r.n_completion]
    return out


def _ref_for(mb: list[Row], ref_by_row: dict[int, torch.Tensor], width: int) -> tuple[torch.Tensor | None, list[int]]:
    """The base log-probs of the micro-batch rows kl_ref is measured on, [picked, width], and their positions."""
    picked = [i for i, r in enumerate(mb) if id(r) in ref_by_row]
    if not picked:
        return None, []
    ref = torch.zeros(len(picked), width)
    for j, i in enumerate(picked):
        x = ref_by_row[id(mb[i])]
        ref[j, : len(x)] = x
    return ref, picked


def _collect(stats: _RoleStats, rows: list[Row], b: dict, logp, old, ent, algo: AlgoCfg,
             ref: torch.Tensor | None = None, ref_rows: list[int] = ()) -> None:
    """Per-row sums of every optimizer-side diagnostic (SPEC §6), turned into means per role.

    π = trainer log-prob, μ = rollout log-prob; ratios are clamped at ±20 in log space.
    `ref` holds base-model log-probs for the rows at positions `ref_rows` only (kl_ref is
    estimated on a sample of rows: see `kl_ref_sample`).
    """
    with torch.no_grad():
        m, adv = b["mask"], b["adv"].unsqueeze(-1)
        ratio = torch.exp((logp - old).clamp(-_CLAMP, _CLAMP)) * m
        low, high = 1 - algo.clip_low, 1 + algo.clip_high
        clipped = (((adv > 0) & (ratio > high)) | ((adv < 0) & (ratio < low))).float() * m
        pg = torch.maximum(-adv * ratio, -adv * ratio.clamp(low, high)) * m
        log_r = (logp - b["rollout_logp"]) * m  # log π/μ on completion tokens
        r = torch.exp(log_r.clamp(-_CLAMP, _CLAMP))
        vs_rollout = r ** 2 * m
        k3 = (r - 1 - log_r) * m  # KL(μ‖π) estimator, >= 0, low variance
        seq_ratio2 = torch.exp((2 * log_r.sum(-1)).clamp(-_CLAMP, _CLAMP))
        n_T = m.sum(-1).clamp(min=1)
        kl_ref: dict[int, float] = {}
        if ref is not None and len(ref_rows):
            sub = list(ref_rows)
            log_ref = (ref - logp[sub]) * m[sub]  # log ref/π on tokens sampled from (≈) π
            per_row = ((torch.exp(log_ref.clamp(-_CLAMP, _CLAMP)) - 1 - log_ref) * m[sub]).sum(-1)
            kl_ref = {i: float(v) for i, v in zip(sub, per_row)}
        for i, row in enumerate(rows):
            extra = {"kl_ref": kl_ref[i], "kl_ref_tokens": float(m[i].sum())} if i in kl_ref else {}
            stats.add(row.role, tokens=float(m[i].sum()), seqs=1.0, loss=float(pg[i].sum() / n_T[i]),
                      ratio2=float(vs_rollout[i].sum()), seq_ratio2=float(seq_ratio2[i]),
                      kl=float(-log_r[i].sum()), k3_kl=float(k3[i].sum()),
                      entropy=float((ent[i] * m[i]).sum()), clipped=float(clipped[i].sum()),
                      ppl=math.exp(min(50.0, -float((logp[i] * m[i]).sum() / n_T[i]))),
                      rollout_ppl=math.exp(min(50.0, -float((b["rollout_logp"][i] * m[i]).sum() / n_T[i]))),
                      **extra)


def _flat_grad(params: list[torch.nn.Parameter]) -> torch.Tensor:
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).detach().flatten().float()
                      for p in params])


def _norm(rows: list[Row], agg: str) -> float:
    # The whole mini-batch's denominator (see loss.agg_norm), so micro-batches sum exactly.
    if agg == "token-mean":
        return float(sum(r.n_completion for r in rows))
    return float(sum(1 for r in rows if r.n_completion > 0))


def update_policy(model, policy: str, rows: list[Row], popt: PolicyOptim, algo: AlgoCfg, optim: OptimCfg,
                  *, pad_id: int, temperature: float, rng: random.Random,
                  kl_ref: bool = True, kl_ref_rows: int = 16, grad_shares: bool = True) -> tuple[dict, dict]:
    """Train one policy on its rows. Returns (per-role metrics, policy metrics)."""
    return update_policies(model, {policy: rows}, {policy: popt}, algo, optim, pad_id=pad_id, temperature=temperature,
                           rng=rng, kl_ref=kl_ref, kl_ref_rows=kl_ref_rows, grad_shares=grad_shares)[policy]


def update_policies(model, rows_by_policy: dict[str, list[Row]], optims: dict[str, PolicyOptim], algo: AlgoCfg,
                    optim: OptimCfg, *, pad_id: int, temperature: float, rng: random.Random, kl_ref: bool = True,
                    kl_ref_rows: int = 16, grad_shares: bool = True) -> dict[str, tuple[dict, dict]]:
    """Train each policy on its rows. Returns {policy: (per-role metrics, policy metrics)}.

    Where the LoRA router can mix the policies (plain LoRA), their rows share every forward
    and backward: one pass over the model per micro-batch instead of one per policy. The
    row mask gives each adapter the gradient of its own rows only, each policy keeps its own
    loss normaliser, optimizer, clip and non-finite skip, so the result is the same as
    training them one after another (tested). Otherwise they are trained one after another.

    Micro-batches are formed role by role, so when several roles share an adapter (SP) the
    gradient each role adds can be read off between them: `grad_share` is its projection on
    the step's total gradient (the shares sum to 1), `grad_norm` its own norm. A policy with
    one role reports share 1 and the adapter's pre-clip norm.
    """
    rows_by_policy = {p: [r if r.policy == p else replace(r, policy=p) for r in rows]
                      for p, rows in rows_by_policy.items() if rows}
    policies = list(rows_by_policy)
    set_training(model, True)
    ref_by_row: dict[int, torch.Tensor] = {}
    if kl_ref:
        sample = set().union(*(kl_ref_sample(rows, kl_ref_rows) for rows in rows_by_policy.values()))
        ref_by_row = _ref_logps(model, [r for rows in rows_by_policy.values() for r in rows if id(r) in sample],
                                pad_id, temperature, algo.micro_batch_tokens)
    router = router_for(model)
    groups = [policies] if len(policies) > 1 and router.plain(policies) else [[p] for p in policies]
    out: dict[str, tuple[dict, dict]] = {}
    for group in groups:
        out.update(_update_group(model, router, group, rows_by_policy, optims, algo, optim, pad_id=pad_id,
                                 temperature=temperature, rng=rng, ref_by_row=ref_by_row, grad_shares=grad_shares))
    return out


def _update_group(model, router, group: list[str], rows_by_policy: dict[str, list[Row]], optims: dict[str, PolicyOptim],
                  algo: AlgoCfg, optim: OptimCfg, *, pad_id: int, temperature: float, rng: random.Random,
                  ref_by_row: dict[int, torch.Tensor], grad_shares: bool) -> dict[str, tuple[dict, dict]]:
    """PPO-clip epochs for the policies of one group, every forward and backward shared by the group."""
    stats, grad_norms = _RoleStats(), {p: [] for p in group}
    skipped = {p: {"loss": 0, "grad": 0} for p in group}  # mini-batches not applied, by what was non-finite
    on_policy = algo.ppo_epochs == 1 and algo.mini_batches == 1
    mixed = len(group) > 1
    with (router.mixed(group) if mixed else router.policy(group[0])) as route:
        names = group if mixed else None  # collate's policy index, for the router's row mask

        def forward(mb: list[Row]) -> tuple[dict, torch.Tensor, torch.Tensor]:
            b = collate(mb, pad_id, model.device, policies=names)
            return (b, *_forward(model, b, temperature, route))

        old_by_row: dict[int, torch.Tensor] = {}
        if not on_policy:  # frozen copy of pi_old for every row, before any step
            with torch.no_grad():
                for mb in micro_batches([r for p in group for r in rows_by_policy[p]], algo.micro_batch_tokens):
                    _, lp, _ = forward(mb)
                    for r, x in zip(mb, lp):
                        old_by_row[id(r)] = x[: r.n_completion]
        for _ in range(algo.ppo_epochs):
            minis: dict[str, list[list[Row]]] = {}
            for p in group:
                order = rows_by_policy[p][:]
                rng.shuffle(order)
                size = math.ceil(len(order) / algo.mini_batches)
                minis[p] = [order[lo: lo + size] for lo in range(0, len(order), size)]
            for i_mini in range(max(map(len, minis.values()))):
                mini = {p: minis[p][i_mini] for p in group if i_mini < len(minis[p])}
                norm = {p: _norm(rows, algo.loss_agg) for p, rows in mini.items()}
                finite = {p: True for p in mini}
                roles = {p: sorted({r.role for r in rows}) for p, rows in mini.items()}
                role_grads: dict[str, dict[str, torch.Tensor]] = {p: {} for p in mini}
                before: dict[str, torch.Tensor | None] = {p: None for p in mini}
                for p in mini:
                    optims[p].optimizer.zero_grad(set_to_none=True)
                for j in range(max(map(len, roles.values()))):  # j-th role of every policy in one pass
                    rows_j = [r for p, rows in mini.items() if j < len(roles[p]) for r in rows if r.role == roles[p][j]]
                    for mb in micro_batches(rows_j, algo.micro_batch_tokens):
                        b, logp, ent = forward(mb)
                        if on_policy:
                            old = logp.detach()
                        else:
                            old = torch.zeros_like(logp)
                            for i, r in enumerate(mb):
                                x = old_by_row[id(r)]
                                old[i, : len(x)] = x
                        total = None
                        for k, p in enumerate(group):
                            # Each policy's loss on its own rows, with its own normaliser.
                            own = b["policy_of_row"] == k if mixed else slice(None)
                            if p not in mini or (mixed and not bool(own.any())):
                                continue
                            loss, _ = ppo_clip_loss(logp[own], old[own], b["adv"][own], b["mask"][own],
                                                    clip_low=algo.clip_low, clip_high=algo.clip_high,
                                                    dual_clip=algo.dual_clip, agg=algo.loss_agg, norm=norm[p])
                            # After a non-finite micro-batch the policy's mini-batch is lost anyway; a
                            # non-finite loss never enters the sum, so it cannot reach another adapter.
                            finite[p] &= bool(torch.isfinite(loss))
                            if finite[p]:
                                total = loss if total is None else total + loss
                        if total is not None:
                            total.backward()
                        ref, picked = _ref_for(mb, ref_by_row, logp.shape[1])
                        _collect(stats, mb, b, logp.detach(), old, ent.detach(), algo, ref, picked)
                    for p in mini:  # the gradient role j added to each policy's adapter
                        if grad_shares and len(roles[p]) > 1 and j < len(roles[p]):
                            now = _flat_grad(optims[p].params)
                            role_grads[p][roles[p][j]] = now if before[p] is None else now - before[p]
                            before[p] = now
                for p in mini:
                    popt = optims[p]
                    gn = float(torch.nn.utils.clip_grad_norm_(popt.params, optim.grad_clip))  # pre-clip norm
                    if not finite[p]:
                        skipped[p]["loss"] += 1
                    elif not math.isfinite(gn):
                        skipped[p]["grad"] += 1
                    else:
                        popt.optimizer.step()
                        popt.scheduler.step()
                        grad_norms[p].append(gn)
                        if grad_shares or len(roles[p]) == 1:
                            _add_grad_shares(stats, roles[p], role_grads[p], gn)
                    popt.optimizer.zero_grad(set_to_none=True)  # a skipped mini-batch's gradients go too
    per_role_all = stats.result()
    out = {}
    for p in group:
        rows = rows_by_policy[p]
        per_role = {role: m for role, m in per_role_all.items() if role in {r.role for r in rows}}
        tok = sum(s["tokens"] for s in per_role.values())
        policy_metrics = {"grad_norm": fmean(grad_norms[p]) if grad_norms[p] else float("nan"),
                          "lr": optims[p].scheduler.get_last_lr()[0], "rows": len(rows), "tokens": tok,
                          "nonfinite_loss": skipped[p]["loss"], "nonfinite_grad": skipped[p]["grad"]}
        for key in ("loss", "chi2_token", "training_ppl", "rollout_ppl", "kl", "k3_kl", "kl_ref", "entropy", "clip_frac"):
            w = [(s[key], s["tokens"]) for s in per_role.values() if key in s]
            if w:
                policy_metrics[key] = sum(v * n for v, n in w) / max(tok, 1.0)
        out[p] = (per_role, policy_metrics)
    return out


def kl_ref_sample(rows: list[Row], per_role: int) -> set[int]:
    """ids of the rows kl_ref is measured on: up to `per_role` evenly spaced rows of each role.

    The base model's log-probs cost one extra forward over the rows measured; a fixed-size
    sample keeps that cost small and independent of batch size. Rows arrive in episode order
    (problems are shuffled per step), so evenly spaced rows span the step's problems. No
    random draw: the training RNG stream is left untouched.
    """
    by_role: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        by_role[r.role].append(r)
    out: set[int] = set()
    for rs in by_role.values():
        k = min(per_role, len(rs))
        out |= {id(rs[(j * len(rs)) // k]) for j in range(k)}
    return out


def _add_grad_shares(stats: _RoleStats, roles: list[str], role_grads: dict[str, torch.Tensor], total_norm: float) -> None:
    if len(roles) == 1:
        stats.add(roles[0], grad_norm=total_norm, grad_share=1.0, opt_steps=1.0)
        return
    total = sum(role_grads.values())
    denom = float(total @ total)
    for role, g in role_grads.items():
        share = float(g @ total) / denom if denom > 0 else float("nan")
        stats.add(role, grad_norm=float(g.norm()), grad_share=share, opt_steps=1.0)
