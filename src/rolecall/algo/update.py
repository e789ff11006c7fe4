"""The update stage: PPO-clip optimizer steps for each policy on its own tokens.

Mini-batches follow the rows, as in the paper's trainer (Table 7 counts the PPO mini-batch
in problems: 64 problems x 8 samples = 512 rows per optimizer step). Each policy's rows are
dealt into ceil(rows / mini_batch_rows) mini-batches of near-equal size, one optimizer step
each, so an Isolated-Policy role that plays three parallel slots takes three steps per
iteration and a role with one slot one; under Shared-Policy the one adapter takes one step per
mini-batch of all roles' rows. Only the first mini-batch of an iteration is on-policy: the
later ones are scored against π_old, the policy before the iteration's first step, from one
no-grad pass. (`algo.mini_batches` instead fixes the count per policy; not the paper's rule.)

Policies whose adapters the LoRA router can mix share every forward and backward pass (a
row mask keeps each adapter's gradient to its own rows); the rest train one after another.
Mini-batches are split into token-budgeted micro-batches with gradient accumulation
normalised by the whole mini-batch, so memory is bounded and the gradient is the same
whatever the split.

A mini-batch whose loss or gradient norm is NaN/Inf is skipped whole: no optimizer step,
no schedule step, its gradients discarded, so weights, AdamW moments and the learning-rate
schedule are bit-identical to before it. So is an update that would itself be non-finite: a
NaN/Inf learning rate, or a step that leaves a weight NaN/Inf (a finite gradient times a huge
learning rate or weight decay), which is undone. Skips are counted per source
(`nonfinite_loss`, `nonfinite_grad`, `nonfinite_update`) for the trainer's halt rule.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace
from statistics import fmean

import torch

from rolecall.schema import AlgoCfg, OptimCfg
from rolecall.algo.ranks import Ranks
from rolecall.loss import aggregate, coherence_scale, kl_to_ref_per_token, pg_per_token, token_logprobs_and_entropy
from rolecall.policies.lora_router import router_for
from rolecall.policies.model import set_training
from rolecall.algo.batch import Row, collate, micro_batches, share_of_rows
from rolecall.algo.forward import completion_logit_parts, over_parts
from rolecall.algo.memory import micro_batch_tokens
from rolecall.algo.optim import PolicyOptim, build_optimizers  # noqa: F401  (re-exported for callers)
from rolecall.algo.reference import base_logps, padded_rows
from rolecall.algo.role_stats import RoleStats, add_grad_shares, collect, flat_grad, kl_ref_sample


def plan_minibatches(rows: list[Row], mini_batch_rows: int | None, mini_batches: int | None,
                     rng: random.Random) -> list[list[Row]]:
    """Shuffle a policy's rows and deal them into mini-batches, one optimizer step each.

    ceil(rows / mini_batch_rows) mini-batches (the paper's rule), or exactly `mini_batches`;
    near-equal sizes, so no mini-batch is a sliver of leftovers. Neither given: one.
    """
    order = rows[:]
    rng.shuffle(order)
    if mini_batches is not None:
        k = mini_batches
    elif mini_batch_rows is not None:
        k = math.ceil(len(order) / mini_batch_rows)
    else:
        k = 1
    k = max(1, min(k, len(order)))
    size, extra = divmod(len(order), k)
    out, lo = [], 0
    for i in range(k):
        n = size + (i < extra)
        out.append(order[lo: lo + n])
        lo += n
    return out


def _norm(rows: list[Row], agg: str) -> float:
    # The whole mini-batch's denominator (see loss.agg_norm), so micro-batches sum exactly.
    if agg == "token-mean":
        return float(sum(r.n_completion for r in rows))
    return float(sum(1 for r in rows if r.n_completion > 0))


def _forward(model, batch: dict, temperature: float, route=None, *, entropy_grad: bool = False
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs and entropies of the batch's completion tokens; the entropy carries a gradient
    only where the loss has an entropy bonus (`entropy_grad`)."""
    return over_parts(completion_logit_parts(model, batch, route), batch["targets"],
                      lambda z, t: token_logprobs_and_entropy(z, t, temperature, entropy_grad=entropy_grad))


@dataclass
class _Tally:
    """What one policy's update did, for its metrics."""

    grad_norms: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)  # the optimized loss of each applied step
    coherence: list[tuple[float, float]] = field(default_factory=list)  # (cos, scale) per applied step
    skipped: dict[str, int] = field(default_factory=lambda: {"loss": 0, "grad": 0, "update": 0})


def update_policy(model, policy: str, rows: list[Row], popt: PolicyOptim, algo: AlgoCfg, optim: OptimCfg,
                  **kw) -> tuple[dict, dict]:
    """Train one policy on its rows. Returns (per-role metrics, policy metrics)."""
    return update_policies(model, {policy: rows}, {policy: popt}, algo, optim, **kw)[policy]


def update_policies(model, rows_by_policy: dict[str, list[Row]], optims: dict[str, PolicyOptim], algo: AlgoCfg,
                    optim: OptimCfg, *, pad_id: int, temperature: float, rng: random.Random,
                    mini_batch_rows: int | None = None, progress: tuple[float, float] = (0.0, 0.0),
                    kl_ref: bool = True, kl_ref_rows: int = 16, grad_shares: bool = True,
                    dp: Ranks | None = None) -> dict[str, tuple[dict, dict]]:
    """Train each policy on its rows. Returns {policy: (per-role metrics, policy metrics)}.

    `progress` is the fraction of the run at the start and at the end of this iteration; the
    learning rate of each optimizer step follows it (see `optim.LrSchedule`).

    Where the LoRA router can mix the policies (plain LoRA), their rows share every forward
    and backward: one pass over the model per micro-batch instead of one per policy. The
    row mask gives each adapter the gradient of its own rows only, each policy keeps its own
    loss normaliser, optimizer, clip and non-finite skip, so the result is the same as
    training them one after another (tested). Otherwise they are trained one after another.

    Micro-batches are formed role by role, so when several roles share an adapter (SP) the
    gradient each role adds can be read off between them: `grad_share` is its projection on
    the step's total gradient (the shares sum to 1), `grad_norm` its own norm. A policy with
    one role reports share 1 and the adapter's pre-clip norm.

    `dp` (data parallel, an `algo.ranks.Ranks` given from above: `rolecall.distributed.data_parallel`):
    this rank runs its share of each mini-batch's rows (and of the no-grad passes) and the gradients are summed across
    ranks before each step. The per-role metrics are summed over the ranks, so they describe the whole batch;
    grad shares are off.
    """
    rows_by_policy = {p: [r if r.policy == p else replace(r, policy=p) for r in rows]
                      for p, rows in rows_by_policy.items() if rows}
    # `auto` becomes this model's token budget (see algo.memory) for every pass below.
    algo = algo.model_copy(update={"micro_batch_tokens": micro_batch_tokens(algo.micro_batch_tokens, model)})
    policies = list(rows_by_policy)
    set_training(model, True)
    all_rows = [r for rows in rows_by_policy.values() for r in rows]
    # Base-model log-probs: every row for the KL loss, else a fixed sample for the kl_ref diagnostic.
    kl_loss = algo.kl_coef > 0 or any(v > 0 for v in algo.kl_coef_by_role.values())
    if kl_loss:
        wanted = all_rows
    elif kl_ref:
        sample = set().union(*(kl_ref_sample(rs, kl_ref_rows) for rs in rows_by_policy.values()))  # once, not per row
        wanted = [r for r in all_rows if id(r) in sample]
    else:
        wanted = []
    ref_by_row = {}
    if wanted:
        ref_of = lambda rows: base_logps(model, rows, pad_id, temperature, algo.micro_batch_tokens)  # noqa: E731
        ref_by_row = dp.per_row(wanted, ref_of, model.device) if dp is not None else ref_of(wanted)
    router = router_for(model)
    groups = [policies] if len(policies) > 1 and router.plain(policies) else [[p] for p in policies]
    out: dict[str, tuple[dict, dict]] = {}
    for group in groups:
        out.update(_update_group(model, router, group, rows_by_policy, optims, algo, optim, pad_id=pad_id,
                                 temperature=temperature, rng=rng, mini_batch_rows=mini_batch_rows, progress=progress,
                                 ref_by_row=ref_by_row, kl_loss=kl_loss, grad_shares=grad_shares and dp is None,
                                 dp=dp))
    return out


def _update_group(model, router, group: list[str], rows_by_policy: dict[str, list[Row]],
                  optims: dict[str, PolicyOptim], algo: AlgoCfg, optim: OptimCfg, *, pad_id: int, temperature: float,
                  rng: random.Random, mini_batch_rows: int | None, progress: tuple[float, float],
                  ref_by_row: dict[int, torch.Tensor], kl_loss: bool, grad_shares: bool,
                  dp: Ranks | None = None) -> dict[str, tuple[dict, dict]]:
    """PPO-clip epochs for the policies of one group, every forward and backward shared by the group."""
    stats, tally = RoleStats(algo.loss_agg), {p: _Tally() for p in group}
    # Every epoch's mini-batches up front (epoch-major shuffles, as the loop consumes them).
    plans = [{p: plan_minibatches(rows_by_policy[p], mini_batch_rows, algo.mini_batches, rng) for p in group}
             for _ in range(algo.ppo_epochs)]
    n_minis = {p: sum(len(plan[p]) for plan in plans) for p in group}
    mixed = len(group) > 1
    with (router.mixed(group) if mixed else router.policy(group[0])) as route:
        names = group if mixed else None  # collate's policy index, for the router's row mask

        def forward(mb: list[Row]) -> tuple[dict, torch.Tensor, torch.Tensor]:
            b = collate(mb, pad_id, model.device, policies=names)
            return (b, *_forward(model, b, temperature, route, entropy_grad=algo.entropy_coef > 0))

        # π_old for every row not trained on-policy (the first mini-batch of the first epoch is).
        first = {id(r) for p in group for r in plans[0][p][0]} if algo.ppo_epochs == 1 else set()
        stale = [r for p in group for r in rows_by_policy[p] if id(r) not in first]

        def old_logps(rows: list[Row]) -> dict[int, torch.Tensor]:
            out = {}
            with torch.no_grad():
                for mb in micro_batches(rows, algo.micro_batch_tokens):
                    _, lp, _ = forward(mb)
                    for r, x in zip(mb, lp):
                        out[id(r)] = x[: r.n_completion]
            return out

        old_by_row: dict[int, torch.Tensor] = {}
        if stale:  # data parallel: each rank computes a share, every rank gets all
            old_by_row = dp.per_row(stale, old_logps, model.device) if dp is not None else old_logps(stale)
        done = {p: 0 for p in group}  # mini-batches taken so far, for the schedule's progress
        for plan in plans:
            for i_mini in range(max(len(plan[p]) for p in group)):
                mini = {p: plan[p][i_mini] for p in group if i_mini < len(plan[p])}
                _minibatch(model, forward, mini, group, optims, algo, optim, stats, tally,
                           {p: done[p] for p in mini}, old_by_row, ref_by_row, kl_loss, grad_shares,
                           {p: progress[0] + (progress[1] - progress[0]) * done[p] / n_minis[p] for p in mini}, dp)
                for p in mini:
                    done[p] += 1
    if dp is not None:  # every rank's micro-batches, not only this one's
        stats.combine(dp.gather([stats.sums()]))
    return _metrics(group, rows_by_policy, optims, stats, tally, n_minis)


def _minibatch(model, forward, mini: dict[str, list[Row]], group: list[str], optims: dict[str, PolicyOptim],
               algo: AlgoCfg, optim: OptimCfg, stats: RoleStats, tally: dict[str, _Tally], index: dict[str, int],
               old_by_row: dict[int, torch.Tensor], ref_by_row: dict[int, torch.Tensor], kl_loss: bool,
               grad_shares: bool, progress: dict[str, float], dp: Ranks | None = None) -> None:
    """One optimizer step for each policy in `mini`: accumulate its micro-batches, then step."""
    mixed = len(group) > 1
    norm = {p: _norm(rows, algo.loss_agg) for p, rows in mini.items()}
    finite = {p: True for p in mini}
    loss_sum = {p: 0.0 for p in mini}
    roles = {p: sorted({r.role for r in rows}) for p, rows in mini.items()}
    role_grads: dict[str, dict[str, torch.Tensor]] = {p: {} for p in mini}
    before: dict[str, torch.Tensor | None] = {p: None for p in mini}
    for p in mini:
        optims[p].optimizer.zero_grad(set_to_none=True)
    for j in range(max(map(len, roles.values()))):  # j-th role of every policy in one pass
        rows_j = [r for p, rows in mini.items() if j < len(roles[p]) for r in rows if r.role == roles[p][j]]
        if dp is not None:  # this rank's share of the rows (a mini-batch is often one micro-batch)
            rows_j = share_of_rows(rows_j, dp.rank, dp.world)
        for mb in micro_batches(rows_j, algo.micro_batch_tokens):
            b, logp, ent = forward(mb)
            old = logp.detach().clone()
            for i, r in enumerate(mb):  # rows past the first mini-batch are scored against π_old
                x = old_by_row.get(id(r))
                if x is not None:
                    old[i, : len(x)] = x
            ref, ref_rows = padded_rows(mb, ref_by_row, logp.shape[1], logp.device)
            kl_coef = torch.tensor([algo.kl_coef_by_role.get(r.role, algo.kl_coef) for r in mb], dtype=logp.dtype,
                                   device=logp.device) if kl_loss else None
            total = None
            for k, p in enumerate(group):
                # Each policy's loss on its own rows, with its own normaliser.
                own = b["policy_of_row"] == k if mixed else slice(None)
                if p not in mini or (mixed and not bool(own.any())):
                    continue
                loss = _objective(logp[own], old[own], ent[own], b["mask"][own], b["adv"][own], algo, norm[p],
                                  None if kl_coef is None else (kl_coef[own], ref[own]))
                # After a non-finite micro-batch the policy's mini-batch is lost anyway; a
                # non-finite loss never enters the sum, so it cannot reach another adapter.
                finite[p] &= bool(torch.isfinite(loss))
                if finite[p]:
                    loss_sum[p] += float(loss.detach())
                    total = loss if total is None else total + loss
            if total is not None:
                total.backward()
            collect(stats, mb, b, logp.detach(), old, ent.detach(), algo, index, ref, ref_rows)
        for p in mini:  # the gradient role j added to each policy's adapter
            if grad_shares and len(roles[p]) > 1 and j < len(roles[p]):
                now = flat_grad(optims[p].params)
                role_grads[p][roles[p][j]] = now if before[p] is None else now - before[p]
                before[p] = now
    if dp is not None:  # the whole mini-batch's gradient, loss and finiteness on every rank
        for p in mini:
            dp.sum_grads(optims[p].params)
            finite[p] = dp.all_true(finite[p])
            loss_sum[p] = dp.sum_float(loss_sum[p])
    for p in mini:
        _step(optims[p], algo, optim, finite[p], progress[p], tally[p], loss_sum[p], stats, roles[p], role_grads[p],
              grad_shares)


def _objective(logp, old, ent, mask, adv, algo: AlgoCfg, norm: float,
               kl: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
    """The loss one policy minimizes on its rows of a micro-batch: PPO-clip, plus the KL anchor
    to the base model (`kl` = per-row weight, base log-probs) and minus the entropy bonus."""
    pg, _, _, _ = pg_per_token(logp, old, adv, mask, clip_low=algo.clip_low, clip_high=algo.clip_high,
                               dual_clip=algo.dual_clip)
    loss = aggregate(pg, mask, algo.loss_agg, norm)
    if kl is not None:
        coef_B, ref = kl
        loss = loss + aggregate(coef_B.unsqueeze(-1) * kl_to_ref_per_token(logp, ref, mask), mask, algo.loss_agg, norm)
    if algo.entropy_coef > 0:
        loss = loss - algo.entropy_coef * aggregate(ent, mask, algo.loss_agg, norm)
    return loss


def _step(popt: PolicyOptim, algo: AlgoCfg, optim: OptimCfg, finite: bool, progress: float, tally: _Tally,
          loss: float, stats: RoleStats, roles: list[str], role_grads: dict[str, torch.Tensor], grad_shares: bool) -> None:
    """Clip and apply one policy's accumulated gradient, or skip the step if anything is non-finite."""
    cos_scale = ema = None
    if finite and algo.coherence_lambda > 0:
        g = flat_grad(popt.params)
        scale, cos = coherence_scale(g, popt.grad_ema, algo.coherence_lambda)
        if math.isfinite(float(g.norm())):
            for p in popt.params:
                if p.grad is not None:
                    p.grad.mul_(scale)
            ema = g if popt.grad_ema is None else algo.coherence_beta * popt.grad_ema + (1 - algo.coherence_beta) * g
            cos_scale = (cos, scale)
    gn = float(torch.nn.utils.clip_grad_norm_(popt.params, popt.grad_clip))  # pre-clip norm; the policy's own limit
    if not finite:
        tally.skipped["loss"] += 1
    elif not math.isfinite(gn):
        tally.skipped["grad"] += 1
    elif not _apply(popt, progress):
        tally.skipped["update"] += 1
    else:
        popt.schedule.step()
        if ema is not None:  # the gradient history moves only with a step taken
            popt.grad_ema = ema
        tally.grad_norms.append(gn)
        tally.losses.append(loss)
        if cos_scale is not None:
            tally.coherence.append(cos_scale)
        if grad_shares or len(roles) == 1:
            add_grad_shares(stats, roles, role_grads, gn)
    popt.optimizer.zero_grad(set_to_none=True)  # a skipped mini-batch's gradients go too


def _apply(popt: PolicyOptim, progress: float) -> bool:
    """Take the optimizer step at `progress`'s learning rate; False, with nothing changed, when the
    update is not finite: a NaN/Inf learning rate, or a step that left a weight NaN/Inf.

    Gradients reach here finite and clipped, and AdamW moves a weight by at most
    lr * (|m|/(sqrt(v)+eps) + weight_decay * |w|), where |m|/sqrt(v) stays below ~10 with
    the default betas: with lr * (1 + weight_decay) <= 1 finite weights stay finite. Only a
    step past that bound is taken on a saved copy of the weights and AdamW state and undone if
    a weight came out non-finite, so the usual step costs no copy."""
    lr = popt.schedule.at(progress)
    if not math.isfinite(lr):
        return False
    decay = max((g.get("weight_decay") or 0.0) for g in popt.optimizer.param_groups)
    saved = _save(popt) if lr * (1.0 + decay) > 1.0 else None
    popt.schedule.set(progress)
    popt.optimizer.step()
    for p in popt.params:
        # The fused AdamW kernel writes the weights in place without moving their `_version`, on
        # which the LoRA router keys its bf16 copies of float32 adapters: without this, bf16
        # rollouts kept sampling from the adapters first cast (the untrained ones) while
        # training went on, and validation stayed at the base model's accuracy.
        torch.autograd.graph.increment_version(p)
    if saved is None or all(bool(torch.isfinite(p).all()) for p in popt.params):
        return True
    _restore(popt, saved)
    return False


def _save(popt: PolicyOptim) -> tuple:
    """The weights, AdamW state and learning rates a step changes."""
    opt = popt.optimizer
    state = {p: {k: v.clone() if torch.is_tensor(v) else v for k, v in opt.state[p].items()}
             for p in popt.params if p in opt.state}
    return [p.detach().clone() for p in popt.params], state, popt.schedule.lr, [g["lr"] for g in opt.param_groups]


def _restore(popt: PolicyOptim, saved: tuple) -> None:
    params, state, lr, group_lrs = saved
    opt = popt.optimizer
    with torch.no_grad():
        for p, old in zip(popt.params, params):
            p.copy_(old)
    for p in popt.params:
        if p in state:
            opt.state[p] = state[p]
        else:
            opt.state.pop(p, None)  # no state before this step: none after it
    popt.schedule.lr = lr
    for g, old_lr in zip(opt.param_groups, group_lrs):
        g["lr"] = old_lr


def _metrics(group: list[str], rows_by_policy: dict[str, list[Row]], optims: dict[str, PolicyOptim],
             stats: RoleStats, tally: dict[str, _Tally], n_minis: dict[str, int]) -> dict[str, tuple[dict, dict]]:
    per_role_all = stats.result()
    out = {}
    for p in group:
        rows, t = rows_by_policy[p], tally[p]
        per_role = {role: m for role, m in per_role_all.items() if role in {r.role for r in rows}}
        tok = sum(s["tokens"] for s in per_role.values())
        pol = {"grad_norm": fmean(t.grad_norms) if t.grad_norms else float("nan"),
               "loss": fmean(t.losses) if t.losses else float("nan"),
               "optimizer_steps": len(t.grad_norms), "mini_batches": n_minis[p],
               "lr": optims[p].schedule.lr, "rows": len(rows), "tokens": tok,
               "nonfinite_loss": t.skipped["loss"], "nonfinite_grad": t.skipped["grad"],
               "nonfinite_update": t.skipped["update"]}
        if t.coherence:
            pol["coherence_cos"] = fmean(c for c, _ in t.coherence if math.isfinite(c)) if any(
                math.isfinite(c) for c, _ in t.coherence) else float("nan")
            pol["coherence_scale"] = fmean(s for _, s in t.coherence)
        for key in ("chi2_token", "training_ppl", "rollout_ppl", "kl", "k3_kl", "kl_ref", "entropy", "clip_frac"):
            w = [(s[key], s["tokens"]) for s in per_role.values() if key in s]
            if w:
                pol[key] = sum(v * n for v, n in w) / max(tok, 1.0)
        pol.update(stats.by_minibatch(p))
        out[p] = (per_role, pol)
    return out
