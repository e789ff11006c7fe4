"""Optimizer-side diagnostics (chi2, perplexities, KL, clip fraction, entropy, grad norm)
against hand computations, and each role's share of a
shared adapter's gradient under Shared-Policy."""
from __future__ import annotations

import math
import random

import pytest
import torch

from rolecall.config import AlgoCfg, load_config
from rolecall.engines.base import GenRequest
from rolecall.algo.batch import Row, collate
from rolecall.train.stack import build_stack
from rolecall.algo.role_stats import RoleStats, collect
from rolecall.algo.update import update_policy


def test_collect_matches_hand_computation():
    # One row: prompt of 2 tokens, completion of 2 tokens -> columns 0 and 1 (plus one pad column).
    row = Row(ids=[5, 6, 7, 8], n_prompt=2, rollout_logp=[-1.0, -2.0], advantage=1.0, role="g", slot="g0")
    b = collate([row], pad_id=0, width=3)
    logp = torch.tensor([[-0.5, -2.5, 0.0]])  # π on the completion: -0.5, -2.5
    ref = torch.tensor([[-1.5, -2.0, 0.0]])   # base model on the same tokens
    ent = torch.tensor([[0.7, 0.9, 0.0]])
    stats = RoleStats()
    collect(stats, [row], b, logp, logp.clone(), ent, AlgoCfg(), None, ref, [0])
    m = stats.result()["g"]
    lr = [-0.5 - -1.0, -2.5 - -2.0]  # log π/μ = 0.5, -0.5
    assert m["chi2_token"] == pytest.approx(sum(math.exp(x) ** 2 for x in lr) / 2 - 1)
    assert m["chi2_seq"] == pytest.approx(math.exp(2 * sum(lr)) - 1)  # = 0: the two cancel
    assert m["kl"] == pytest.approx(-sum(lr) / 2)
    assert m["k3_kl"] == pytest.approx(sum(math.exp(x) - 1 - x for x in lr) / 2)
    assert m["training_ppl"] == pytest.approx(math.exp(-(-0.5 - 2.5) / 2))
    assert m["rollout_ppl"] == pytest.approx(math.exp(-(-1.0 - 2.0) / 2))
    lref = [-1.5 - -0.5, -2.0 - -2.5]  # log ref/π = -1, 0.5
    assert m["kl_ref"] == pytest.approx(sum(math.exp(x) - 1 - x for x in lref) / 2)
    assert m["entropy"] == pytest.approx((0.7 + 0.9) / 2)
    assert m["clip_frac"] == 0.0


def _sp_rows(stack):
    torch.manual_seed(0)
    outs = stack.engine.generate([GenRequest([{"role": "user", "content": f"{i}+{i}"}], "shared", 6)
                                  for i in range(6)], temperature=1.0)
    roles = ["generator", "generator", "generator", "aggregator", "aggregator", "aggregator"]
    return [Row(o.prompt_ids + o.completion_ids, len(o.prompt_ids), o.logprobs, [1.0, -1.0, 0.5][i % 3], r, r)
            for i, (o, r) in enumerate(zip(outs, roles))]


def _role_grad(stack, rows, role, all_rows):
    """The gradient of one role's part of the loss, computed on its own (reference)."""
    from rolecall.loss import ppo_clip_loss
    from rolecall.policies.lora_router import router_for
    from rolecall.algo.role_stats import flat_grad as _flat_grad
    from rolecall.algo.update import _forward, _norm

    cfg = stack.cfg
    popt = stack.optims["shared"]
    popt.optimizer.zero_grad(set_to_none=True)
    with router_for(stack.model).policy("shared"):
        b = collate([r for r in rows if r.role == role], stack.tok.pad_token_id)
        logp, _ = _forward(stack.model, b, cfg.rollout.temperature)
        loss, _ = ppo_clip_loss(logp, logp.detach(), b["adv"], b["mask"], agg=cfg.algo.loss_agg,
                                norm=_norm(all_rows, cfg.algo.loss_agg))
        loss.backward()
    g = _flat_grad(popt.params)
    popt.optimizer.zero_grad(set_to_none=True)
    return g


def test_shared_policy_grad_share_is_each_roles_projection(tiny_model_dir):
    cfg = load_config(None, [f"model.path={tiny_model_dir}", "routing=shared", "task.n_val=8", "train.threads=2"])
    stack = build_stack(cfg)
    with torch.no_grad():  # a non-trivial adapter, so both LoRA factors get gradient
        for n, p in stack.model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.1)
    rows = _sp_rows(stack)
    g = {r: _role_grad(stack, rows, r, rows) for r in ("generator", "aggregator")}
    total = g["generator"] + g["aggregator"]
    expect = {r: float(v @ total) / float(total @ total) for r, v in g.items()}
    per_role, pol = update_policy(stack.model, "shared", rows, stack.optims["shared"], cfg.algo, cfg.optim,
                                  pad_id=stack.tok.pad_token_id, temperature=cfg.rollout.temperature,
                                  rng=random.Random(0))
    assert per_role["generator"]["grad_share"] + per_role["aggregator"]["grad_share"] == pytest.approx(1.0)
    for r in ("generator", "aggregator"):
        assert per_role[r]["grad_share"] == pytest.approx(expect[r], rel=1e-3, abs=1e-5)
        assert per_role[r]["grad_norm"] == pytest.approx(float(g[r].norm()), rel=1e-3)
    assert pol["grad_norm"] == pytest.approx(float(total.norm()), rel=1e-3)
    assert "kl_ref" in per_role["generator"] and per_role["generator"]["kl_ref"] >= 0


def test_kl_ref_sample_takes_evenly_spaced_rows_of_each_role():
    from rolecall.algo.role_stats import kl_ref_sample

    rows = [Row([1, 2], 1, [0.0], 0.0, "g" if i < 30 else "a", "s") for i in range(34)]
    picked = kl_ref_sample(rows, 3)
    idx = sorted(i for i, r in enumerate(rows) if id(r) in picked)
    assert idx == [0, 10, 20, 30, 31, 32]
    assert len(kl_ref_sample(rows, 100)) == 34
