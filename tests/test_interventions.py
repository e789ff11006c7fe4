"""The paper's optional interventions: KL to the base model (global and per-role), the entropy
bonus and the gradient-coherence regularizer, each checked against a hand computation."""
from __future__ import annotations

import math

import pytest
import torch

from rolecall.config import AlgoCfg, OptimCfg, load_config
from rolecall.loss import aggregate, coherence_scale, kl_to_ref_per_token, pg_per_token
from rolecall.algo.optim import LrSchedule, PolicyOptim
from rolecall.algo.update import _objective, _step, _Tally
from rolecall.algo.role_stats import RoleStats


def test_all_off_by_default():
    a = AlgoCfg()
    assert (a.kl_coef, a.kl_coef_by_role, a.entropy_coef, a.coherence_lambda) == (0.0, {}, 0.0, 0.0)


def test_kl_to_ref_value_and_gradient_by_hand():
    logp = torch.tensor([[-1.0, -2.0, 0.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0, 5.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])  # the third column is padding: no value, no gradient
    kl = kl_to_ref_per_token(logp, ref, mask)
    d = [-0.5, 1.0]  # ref - logp
    assert kl[0, :2].tolist() == pytest.approx([math.exp(x) - x - 1 for x in d])
    assert kl[0, 2].item() == 0.0
    kl.sum().backward()
    assert logp.grad[0].tolist() == pytest.approx([1 - math.exp(d[0]), 1 - math.exp(d[1]), 0.0])


def _batch():
    # Two rows (roles g and e), two tokens each; advantages +1 and -1.
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -1.5]], requires_grad=True)
    old = logp.detach().clone()
    ent = torch.tensor([[0.3, 0.6], [0.9, 1.2]], requires_grad=True)
    mask = torch.ones(2, 2)
    adv = torch.tensor([1.0, -1.0])
    ref = torch.tensor([[-1.5, -1.0], [-0.5, -2.5]])
    return logp, old, ent, mask, adv, ref


def test_per_role_kl_anchor_adds_exactly_its_rows_kl():
    """kl_coef 0.1 globally, 0.5 for role e: the loss grows by mean over rows of
    coef_row * token-mean k3, and the gradient of row g's tokens by 0.1 * (1 - e^d) / 2 / 2."""
    logp, old, ent, mask, adv, ref = _batch()
    algo = AlgoCfg(kl_coef=0.1, kl_coef_by_role={"e": 0.5})
    coef = torch.tensor([0.1, 0.5])
    with_kl = _objective(logp, old, ent, mask, adv, algo, 2.0, (coef, ref))
    plain = _objective(logp, old, ent, mask, adv, AlgoCfg(), 2.0, None)
    d = [[-0.5, 1.0], [0.0, -1.0]]
    k3 = [[math.exp(x) - x - 1 for x in row] for row in d]
    # seq-mean-token-mean: (0.1 * mean(k3[0]) + 0.5 * mean(k3[1])) / 2 rows
    expect = (0.1 * sum(k3[0]) / 2 + 0.5 * sum(k3[1]) / 2) / 2
    assert float(with_kl - plain) == pytest.approx(expect)
    (g_kl,) = torch.autograd.grad(with_kl, logp)
    (g_plain,) = torch.autograd.grad(plain, logp)
    hand = [[c * (1 - math.exp(x)) / 2 / 2 for x in row] for c, row in zip([0.1, 0.5], d)]
    assert (g_kl - g_plain).tolist() == [pytest.approx(r) for r in hand]


def test_entropy_bonus_subtracts_its_weighted_entropy():
    logp, old, ent, mask, adv, _ = _batch()
    bonus = _objective(logp, old, ent, mask, adv, AlgoCfg(entropy_coef=0.2), 2.0, None)
    plain = _objective(logp, old, ent, mask, adv, AlgoCfg(), 2.0, None)
    # seq-mean-token-mean of the entropy: ((0.3 + 0.6) / 2 + (0.9 + 1.2) / 2) / 2 = 0.75
    assert float(plain - bonus) == pytest.approx(0.2 * 0.75)
    (g,) = torch.autograd.grad(bonus, ent)
    assert g.tolist() == [pytest.approx([-0.2 / 4] * 2)] * 2  # -coef / tokens-per-row / rows


def test_coherence_scale_by_hand():
    g = torch.tensor([1.0, 0.0])
    assert coherence_scale(g, None, 0.5)[0] == 1.0  # no history yet
    scale, cos = coherence_scale(g, torch.tensor([1.0, 1.0]), 0.5)
    assert cos == pytest.approx(1 / math.sqrt(2))
    assert scale == pytest.approx(1 - 0.5 / math.sqrt(2))
    assert coherence_scale(g, torch.tensor([-1.0, 0.2]), 0.5)[0] == 1.0  # pointing away: clamp(cos, 0, 1) = 0
    assert coherence_scale(g, torch.tensor([3.0, 0.0]), 1.0)[0] == pytest.approx(0.0)  # same direction, lambda 1


def test_coherence_scales_the_applied_gradient_and_keeps_an_ema():
    """Plain SGD with lr 1 shows the step taken: the first is the raw gradient (no history),
    the second is scaled by 1 - λ·cos(g2, g1); the EMA is β·g1 + (1-β)·g2 of raw gradients."""
    p = torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.SGD([p], lr=1.0)
    popt = PolicyOptim([p], opt, LrSchedule(opt, OptimCfg(lr=1.0, warmup_steps=0, schedule="constant")))
    algo = AlgoCfg(coherence_lambda=0.5, coherence_beta=0.9)
    optim = OptimCfg(grad_clip=100.0)
    tally = _Tally()
    for g in ([1.0, 0.0], [1.0, 1.0]):
        before = p.detach().clone()
        p.grad = torch.tensor(g)
        _step(popt, algo, optim, True, 0.0, tally, 0.0, RoleStats(), ["r"], {}, False)
        step = (before - p.detach()).tolist()
    cos = 1 / math.sqrt(2)
    assert step == pytest.approx([1 - 0.5 * cos] * 2)
    assert popt.grad_ema.tolist() == pytest.approx([0.9 * 1 + 0.1 * 1, 0.9 * 0 + 0.1 * 1])
    assert tally.coherence[1] == (pytest.approx(cos), pytest.approx(1 - 0.5 * cos))


def test_kl_coef_by_role_must_name_roles_of_the_workflow():
    with pytest.raises(ValueError, match="algo.kl_coef_by_role.*not roles"):
        load_config(None, ["algo.kl_coef_by_role={evaluator: 0.1}"])  # voting has no evaluator
    assert load_config(None, ["algo.kl_coef_by_role={aggregator: 0.1}"]).algo.kl_coef_by_role == {"aggregator": 0.1}
