"""Optimizer steps follow the rows (the paper's PPO mini-batch counted in problems), the
learning-rate schedule follows the run, χ² is measured per mini-batch, the logged loss is
the optimized one, and every tensor the update creates lives on the model's device."""
from __future__ import annotations

import math
import random

import pytest
import torch

from rolecall.config import AlgoCfg, OptimCfg, load_config
from rolecall.engines.base import GenRequest
from rolecall.loss import ppo_clip_loss
from rolecall.policies.lora_router import router_for
from rolecall.algo.role_stats import RoleStats, collect
from rolecall.algo.batch import Row, collate
from rolecall.train.stack import build_stack
from rolecall.train.step import train_step
from rolecall.algo.optim import LrSchedule
from rolecall.algo.update import _forward, plan_minibatches, update_policies


def _row(i: int, role: str = "g") -> Row:
    return Row(ids=[1, 2, 3 + i % 5], n_prompt=2, rollout_logp=[-1.0], advantage=1.0, role=role, slot=role)


@pytest.mark.parametrize("n_rows,mb_rows,fixed,sizes", [
    (192, 64, None, [64, 64, 64]),   # voting generator under IP: 3 slots x 8 problems x 8 samples
    (64, 64, None, [64]),            # the aggregator: one slot
    (100, 64, None, [50, 50]),       # ceil(100 / 64) = 2 steps, dealt evenly (no 36-row sliver)
    (5, 64, None, [5]),
    (5, None, 2, [3, 2]),            # the fixed count (not the paper's rule)
    (3, None, 5, [1, 1, 1]),         # never an empty mini-batch
    (7, None, None, [7]),
])
def test_plan_minibatches_follows_the_rows(n_rows, mb_rows, fixed, sizes):
    rows = [_row(i) for i in range(n_rows)]
    plan = plan_minibatches(rows, mb_rows, fixed, random.Random(0))
    assert [len(m) for m in plan] == sizes
    assert sorted(id(r) for m in plan for r in m) == sorted(id(r) for r in rows)  # each row exactly once


def test_config_mini_batch_rows():
    cfg = load_config(None, [])
    assert cfg.mini_batch_rows() == 8 * 8  # default: one step's problems x group size per optimizer step
    cfg = load_config(None, ["algo.mini_batch_problems=4"])
    assert cfg.mini_batch_rows() == 32
    assert load_config(None, ["algo.mini_batches=2"]).mini_batch_rows() is None
    with pytest.raises(ValueError, match="algo.mini_batches.*algo.mini_batch_problems"):
        load_config(None, ["algo.mini_batches=2", "algo.mini_batch_problems=4"])


def test_lr_schedule_warms_up_by_steps_taken_and_decays_by_run_progress():
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([p], lr=1.0)
    s = LrSchedule(opt, OptimCfg(lr=1.0, warmup_steps=3, schedule="cosine"))
    assert s.set(0.0) == pytest.approx(1 / 4)        # step 0 of a 3-step warmup
    s.step()
    assert s.set(0.0) == pytest.approx(2 / 4)
    s.step(), s.step()
    assert s.set(0.5) == pytest.approx(0.5)           # warm: cosine at half the run
    assert opt.param_groups[0]["lr"] == pytest.approx(0.5)
    assert s.set(0.999) == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.999)))
    # A policy taking 3 steps per iteration and one taking 1 follow the same curve in the run.
    a, b = (LrSchedule(opt, OptimCfg(lr=1.0, warmup_steps=0)) for _ in range(2))
    for it in range(4):
        for k in range(3):
            a.set((it + k / 3) / 4), a.step()
        b.set(it / 4), b.step()
    assert a.taken == 12 and b.taken == 4
    assert a.set(0.75) == b.set(0.75)
    s2 = LrSchedule(opt, OptimCfg())
    s2.load_state_dict({"last_epoch": 7})  # a checkpoint written with a LambdaLR
    assert s2.taken == 7


@pytest.fixture(scope="module")
def stack(tiny_model_dir):
    cfg = load_config(None, [f"model.path={tiny_model_dir}", "task.n_val=8", "train.threads=2",
                             "rollout.problems_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=6",
                             "train.steps=4", "optim.lr=0.05", "optim.warmup_steps=0"])
    return build_stack(cfg)


def test_default_voting_ip_generator_takes_three_steps_and_aggregator_one(stack):
    """The embedded default's shape in miniature: 3 generator slots -> 3 optimizer steps per
    iteration, 1 aggregator slot -> 1; the first mini-batch on-policy, the later ones not."""
    real = stack.verifier
    stack.verifier = _ParityVerifier()  # an untrained tiny model never answers right: spread the rewards
    try:
        row, _ = train_step(stack, 1)
    finally:
        stack.verifier = real
    assert row["adv/nonzero_frac"] > 0 if "adv/nonzero_frac" in row else True
    assert row["policy/generator/optimizer_steps"] == 3
    assert row["policy/aggregator/optimizer_steps"] == 1
    assert row["policy/generator/mini_batches"] == 3
    # Mini-batch 0 is scored against the policy that sampled it: χ² is rounding noise.
    assert abs(row["policy/generator/chi2_token_mb0"]) < 1e-3
    assert abs(row["policy/aggregator/chi2_token_mb0"]) < 1e-3
    assert "policy/aggregator/chi2_token_mb1" not in row
    # Later mini-batches were sampled by a policy one or two optimizer steps older (lr 2e-3).
    assert row["policy/generator/chi2_token_mb2"] > abs(row["policy/generator/chi2_token_mb0"])


class _ParityVerifier:
    """Reward 1 for an answer whose characters' codes sum to an even number: spread in the groups
    with no model skill needed. (Parity of the length was not enough: an untrained model that runs
    to the token cap writes answers of one length, and on another CPU's sampling every answer of
    this test's step had an even length, so no group had spread and no gradient flowed.)"""

    def score_many(self, texts, problems):
        from rolecall.rewards.base import Score
        return [Score(float(sum(map(ord, t)) % 2 == 0), "ok") for t in texts]


def _sampled_rows(stack, n=4):
    torch.manual_seed(0)
    outs = stack.engine.generate([GenRequest([{"role": "user", "content": f"{i}+{i}"}], "generator", 6)
                                  for i in range(n)], temperature=1.0)
    return [Row(o.prompt_ids + o.completion_ids, len(o.prompt_ids), o.logprobs, [2.0, -3.0, 0.5, -1.0][i % 4],
                "generator", "generator", "generator") for i, o in enumerate(outs) if o.completion_ids]


def _snapshot(stack):
    return {n: p.detach().clone() for n, p in stack.model.named_parameters()}, \
        {p: o.state_dict() for p, o in stack.optims.items()}


def _restore(stack, snap):
    import copy
    params, optims = snap
    with torch.no_grad():
        for n, p in stack.model.named_parameters():
            p.copy_(params[n])
    for p, s in optims.items():
        stack.optims[p].load_state_dict(copy.deepcopy(s))


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_logged_loss_is_the_optimized_loss(stack, agg):
    """With stale π_old (so the dual clip can bite) the logged policy loss equals ppo_clip_loss
    on the same batch, and the role's loss is its own part reduced the same way."""
    snap = _snapshot(stack)
    rows = _sampled_rows(stack)
    algo = AlgoCfg(loss_agg=agg, dual_clip=1.5, clip_low=0.05, clip_high=0.05)
    b = collate(rows, stack.tok.pad_token_id)
    with torch.no_grad(), router_for(stack.model).policy("generator"):
        logp, _ = _forward(stack.model, b, stack.cfg.rollout.temperature)
    expect, _ = ppo_clip_loss(logp, logp, b["adv"], b["mask"], agg=agg, dual_clip=1.5, clip_low=0.05, clip_high=0.05)
    out = update_policies(stack.model, {"generator": rows}, stack.optims, algo, OptimCfg(), pad_id=stack.tok.pad_token_id,
                          temperature=stack.cfg.rollout.temperature, rng=random.Random(0), kl_ref=False)
    per_role, pol = out["generator"]
    assert pol["loss"] == pytest.approx(float(expect), rel=1e-5, abs=1e-7)
    assert per_role["generator"]["loss"] == pytest.approx(float(expect), rel=1e-5, abs=1e-7)  # one role: the same
    _restore(stack, snap)


def test_logged_role_loss_includes_the_dual_clip_and_aggregation():
    """By hand: A = -1, π/π_old = e² on both tokens. The clipped surrogate is max(e², 1.2) = e²,
    and the dual clip (c = 3) caps it at 3: the logged loss is 3, not e² ≈ 7.39."""
    row = Row(ids=[5, 6, 7, 8], n_prompt=2, rollout_logp=[-1.0, -1.0], advantage=-1.0, role="g", slot="g")
    b = collate([row], pad_id=0)
    logp, old = torch.tensor([[-1.0, -1.0]]), torch.tensor([[-3.0, -3.0]])
    for agg, expect in (("seq-mean-token-mean", 3.0), ("token-mean", 3.0), ("seq-mean-token-sum", 6.0)):
        stats = RoleStats(agg)
        collect(stats, [row], b, logp, old, torch.zeros(1, 2), AlgoCfg(loss_agg=agg))
        assert stats.result()["g"]["loss"] == pytest.approx(expect)
    stats = RoleStats()
    collect(stats, [row], b, logp, old, torch.zeros(1, 2), AlgoCfg(dual_clip=None))
    assert stats.result()["g"]["loss"] == pytest.approx(math.exp(2.0))  # no dual clip: e²


def test_two_minibatches_log_the_mean_optimized_loss(stack):
    snap = _snapshot(stack)
    rows = _sampled_rows(stack)
    algo = AlgoCfg(mini_batches=2, dual_clip=1.01, clip_low=0.001, clip_high=0.001)
    out = update_policies(stack.model, {"generator": rows}, stack.optims, algo, OptimCfg(lr=0.5),
                          pad_id=stack.tok.pad_token_id, temperature=1.0, rng=random.Random(0), kl_ref=False)
    per_role, pol = out["generator"]
    # Two equal halves: the mean of the two mini-batch losses is the role's loss over all rows.
    assert pol["optimizer_steps"] == 2
    assert per_role["generator"]["loss"] == pytest.approx(pol["loss"], rel=1e-5, abs=1e-6)
    _restore(stack, snap)


def test_every_tensor_the_update_creates_follows_the_model_device(stack):
    """A tensor made on the default device (e.g. `torch.zeros(n, w)` without device=) would sit
    on the CPU while the model is on a GPU. Here the default device is `meta` while the model
    is on the CPU: any such tensor is a meta tensor, and mixing it with the model's fails."""
    snap = _snapshot(stack)
    rows = _sampled_rows(stack)
    algo = AlgoCfg(mini_batches=2, kl_coef=0.1, kl_coef_by_role={"generator": 0.2}, entropy_coef=0.01,
                   coherence_lambda=0.5)
    torch.set_default_device("meta")
    try:
        out = update_policies(stack.model, {"generator": rows}, stack.optims, algo, OptimCfg(),
                              pad_id=stack.tok.pad_token_id, temperature=1.0, rng=random.Random(0),
                              kl_ref=True, kl_ref_rows=2)
    finally:
        torch.set_default_device(None)
    assert out["generator"][1]["optimizer_steps"] == 2 and math.isfinite(out["generator"][1]["loss"])
    _restore(stack, snap)
