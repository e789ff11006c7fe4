"""Several policies trained in one shared forward and backward (the LoRA router's row mask)
end where training them one after another ends, and keep their guards apart."""
from __future__ import annotations

import copy
import math
import random

import pytest
import torch

import rolecall.algo.update as update
from rolecall.config import load_config
from rolecall.engines.base import GenRequest
from rolecall.policies.lora_router import router_for
from rolecall.algo.batch import Row
from rolecall.train.stack import build_stack
from rolecall.algo.update import update_policies, update_policy

POLICIES = ("generator", "aggregator")  # voting under Isolated-Policy


@pytest.fixture(scope="module")
def stack(tiny_model_dir):
    cfg = load_config(None, [f"model.path={tiny_model_dir}", "task.n_val=8", "train.threads=2"])
    stack = build_stack(cfg)
    with torch.no_grad():  # non-trivial adapters that differ, so both LoRA factors get gradient
        for n, p in stack.model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.1)
    return stack


def _rows(stack, policy, adv_scale=1.0):
    """Real sampled turns of one policy, two roles' worth of prompts, hand-set advantages."""
    torch.manual_seed(0 if policy == "generator" else 1)
    outs = stack.engine.generate([GenRequest([{"role": "user", "content": f"{i % 3}+{i}"}], policy, 6)
                                  for i in range(6)], temperature=1.0)
    return [Row(o.prompt_ids + o.completion_ids, len(o.prompt_ids), o.logprobs, adv_scale * (-1.0) ** i, policy,
                policy, policy) for i, o in enumerate(outs) if o.completion_ids]


def _save(stack):
    return ({n: p.detach().clone() for n, p in stack.model.named_parameters()},
            {p: (copy.deepcopy(o.optimizer.state_dict()), copy.deepcopy(o.schedule.state_dict()))
             for p, o in stack.optims.items()})


def _restore(stack, saved):
    params, optims = saved
    with torch.no_grad():
        for n, p in stack.model.named_parameters():
            p.copy_(params[n])
    for p, (o, s) in optims.items():
        stack.optims[p].optimizer.load_state_dict(o)
        stack.optims[p].schedule.load_state_dict(s)


def _run(stack, rows, together: bool, mini_batches: int):
    algo = stack.cfg.algo.model_copy(update={"mini_batches": mini_batches})
    kw = dict(pad_id=stack.tok.pad_token_id, temperature=1.0, rng=random.Random(0))
    if together:
        return update_policies(stack.model, rows, stack.optims, algo, stack.cfg.optim, **kw)
    return {p: update_policy(stack.model, p, r, stack.optims[p], algo, stack.cfg.optim, **kw) for p, r in rows.items()}


@pytest.mark.parametrize("mini_batches", [1, 2])
def test_one_shared_pass_equals_one_pass_per_policy(stack, mini_batches):
    assert router_for(stack.model).plain(POLICIES)
    rows = {p: _rows(stack, p) for p in POLICIES}
    start = _save(stack)
    got = _run(stack, rows, True, mini_batches)
    after_together = {n: p.detach().clone() for n, p in stack.model.named_parameters()}
    _restore(stack, start)
    ref = _run(stack, rows, False, mini_batches)
    moved = 0
    for n, p in stack.model.named_parameters():
        torch.testing.assert_close(after_together[n], p.detach(), atol=1e-5, rtol=1e-4)
        moved += not torch.equal(start[0][n], p.detach())
    assert moved and all(any(f".{pol}." in n and not torch.equal(start[0][n], after_together[n])
                             for n in after_together) for pol in POLICIES), "both adapters must move"
    for p in POLICIES:
        (per_role, pol), (ref_role, ref_pol) = got[p], ref[p]
        assert per_role.keys() == ref_role.keys() == {p}
        for k in ("loss", "grad_norm", "kl_ref", "chi2_token", "entropy", "tokens"):
            assert pol[k] == pytest.approx(ref_pol[k], rel=1e-4, abs=1e-6), (p, k)
    _restore(stack, start)


def test_a_nonfinite_loss_in_one_policy_leaves_the_other_training(stack, monkeypatch):
    rows = {"generator": _rows(stack, "generator"), "aggregator": _rows(stack, "aggregator", adv_scale=7.0)}
    start = _save(stack)
    ref = _run(stack, {"generator": rows["generator"]}, False, 1)  # the generator alone
    gen_alone = {n: p.detach().clone() for n, p in stack.model.named_parameters() if ".generator." in n}
    _restore(stack, start)
    real = update._objective

    def poisoned(logp, old, ent, mask, adv, *a, **k):  # NaN for the aggregator's rows (advantage +-7) only
        value = real(logp, old, ent, mask, adv, *a, **k)
        return value * math.nan if bool((adv.abs() == 7.0).any()) else value

    monkeypatch.setattr(update, "_objective", poisoned)
    got = _run(stack, rows, True, 1)
    assert (got["aggregator"][1]["nonfinite_loss"], got["generator"][1]["nonfinite_loss"]) == (1, 0)
    for n, p in stack.model.named_parameters():
        if ".aggregator." in n:
            assert torch.equal(p.detach(), start[0][n]), n  # the poisoned policy did not move
        elif ".generator." in n:
            torch.testing.assert_close(p.detach(), gen_alone[n], atol=1e-5, rtol=1e-4)  # as if trained alone
    assert got["generator"][1]["grad_norm"] == pytest.approx(ref["generator"][1]["grad_norm"], rel=1e-4)
    assert all(p.grad is None for o in stack.optims.values() for p in o.params)
    _restore(stack, start)


@pytest.mark.parametrize("kind", ["dora", "embedding"])
def test_adapters_the_router_cannot_mix_train_one_after_another(tiny_model_dir, kind):
    """A DoRA adapter next to a plain one, or LoRA on the embedding (PEFT's own forward for
    everything, the kl_ref base pass included): no shared pass, each adapter moves alone, and
    PEFT's switches do not leave an adapter frozen (they toggle requires_grad)."""
    from peft import LoraConfig

    from rolecall.config import AlgoCfg, OptimCfg
    from rolecall.engines.hf import HFEngine
    from rolecall.policies.model import attach_adapters, load_base
    from rolecall.algo.optim import build_optimizers

    model, tok = load_base(str(tiny_model_dir))
    if kind == "dora":
        model = attach_adapters(model, ["a"], r=4, alpha=8, dropout=0.0, target_modules="all-linear")
        model.add_adapter("d", LoraConfig(r=4, use_dora=True, target_modules="all-linear", task_type="CAUSAL_LM"))
    else:
        model = attach_adapters(model, ["a", "d"], r=4, alpha=8, dropout=0.0, target_modules=["q_proj", "embed_tokens"])
        assert not router_for(model).plain(["base"])
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.1)
    for n, p in model.named_parameters():
        p.requires_grad_("lora_" in n)
    assert not router_for(model).plain(["a", "d"])
    eng = HFEngine(model, tok)
    rows = {}
    for pol in ("a", "d"):
        torch.manual_seed(0)
        outs = eng.generate([GenRequest([{"role": "user", "content": f"{i}+1"}], pol, 5) for i in range(4)], temperature=1.0)
        rows[pol] = [Row(o.prompt_ids + o.completion_ids, len(o.prompt_ids), o.logprobs, (-1.0) ** i, f"r{pol}", pol)
                     for i, o in enumerate(outs) if o.completion_ids]
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optims = build_optimizers(model, ("a", "d"), OptimCfg())
    out = update_policies(model, rows, optims, AlgoCfg(), OptimCfg(), pad_id=tok.pad_token_id, temperature=1.0,
                          rng=random.Random(0))
    assert set(out) == {"a", "d"} and all(m["nonfinite_loss"] == 0 for _, m in out.values())
    changed = {n for n, p in model.named_parameters() if not torch.equal(before[n], p.detach())}
    assert any(".a." in n for n in changed) and any(".d." in n for n in changed)
    assert all("lora_" in n for n in changed), sorted(changed)[:3]
