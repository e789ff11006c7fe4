"""PPO clip loss and token statistics against hand-computed values."""
from __future__ import annotations

import math

import pytest
import torch

from rolecall.loss import (
    AGG_MODES,
    agg_norm,
    chi2_token,
    ppo_clip_loss,
    token_logprobs_and_entropy,
    training_ppl,
)

NEG_INF = float("-inf")


def _hand_batch():
    """Two sequences, T=3, with known ratios.

    seq0: A=+1, mask [1,1,0], ratios [1.5, 1.0, (pad; logp = -inf)]
      t0: pg1=-1.5, pg2=-1.28 -> max -1.28 (clip active);  t1: -1.0.   sum -2.28, n=2
    seq1: A=-1, mask [1,1,1], ratios [0.5, 4.0, 1.0]
      t0: pg1=0.5, pg2=0.8 -> 0.8 (clip active)
      t1: pg1=4, pg2=1.28 -> 4 -> dual clip min(4, 3) = 3 (dual active)
      t2: 1.0.                                                 sum 4.8, n=3
    """
    old = torch.full((2, 3), -1.0)
    log_r = torch.tensor([[math.log(1.5), 0.0, 0.0], [math.log(0.5), math.log(4.0), 0.0]])
    logp = (old + log_r).clone()
    logp[0, 2] = NEG_INF  # garbage on a padding token must not leak into loss or grad
    logp.requires_grad_(True)
    adv = torch.tensor([1.0, -1.0])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    return logp, old, adv, mask


@pytest.mark.parametrize(
    "agg, expected",
    [
        ("token-mean", (-2.28 + 4.8) / 5),  # 0.504
        ("seq-mean-token-mean", (-2.28 / 2 + 4.8 / 3) / 2),  # 0.23
        ("seq-mean-token-sum", (-2.28 + 4.8) / 2),  # 1.26
    ],
)
def test_hand_computed_loss_each_agg(agg, expected):
    logp, old, adv, mask = _hand_batch()
    loss, m = ppo_clip_loss(logp, old, adv, mask, agg=agg)
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    assert m["pg_loss"] == pytest.approx(expected, rel=1e-5)
    assert m["clip_frac"] == pytest.approx(2 / 5)  # seq0 t0, seq1 t0
    assert m["dual_clip_frac"] == pytest.approx(1 / 5)  # seq1 t1
    assert m["ratio_mean"] == pytest.approx((1.5 + 1 + 0.5 + 4 + 1) / 5, rel=1e-5)
    assert all(type(v) is float for v in m.values())


def test_gradient_only_through_unclipped_tokens():
    # token-mean: d/dlogp of -A*r is -A*r; clipped and dual-clipped tokens are constant.
    # seq0 t1: -1*1/5 = -0.2;  seq1 t2: +1*1/5 = +0.2;  everything else 0 (incl. padding).
    logp, old, adv, mask = _hand_batch()
    loss, _ = ppo_clip_loss(logp, old, adv, mask, agg="token-mean")
    loss.backward()
    expected = torch.tensor([[0.0, -0.2, 0.0], [0.0, 0.0, 0.2]])
    assert torch.allclose(logp.grad, expected, atol=1e-6)


def test_dual_clip_disabled():
    # Without dual clip seq1 t1 keeps pg = 4: seq1 sum 5.8 -> token-mean (-2.28 + 5.8) / 5.
    logp, old, adv, mask = _hand_batch()
    loss, m = ppo_clip_loss(logp, old, adv, mask, agg="token-mean", dual_clip=None)
    assert loss.item() == pytest.approx((-2.28 + 5.8) / 5, rel=1e-5)
    assert m["dual_clip_frac"] == 0.0


def test_norm_overrides_denominator():
    logp, old, adv, mask = _hand_batch()
    loss, _ = ppo_clip_loss(logp, old, adv, mask, agg="seq-mean-token-sum", norm=4.0)
    assert loss.item() == pytest.approx((-2.28 + 4.8) / 4, rel=1e-5)


def test_empty_rows_give_zero_not_nan():
    logp = torch.zeros(2, 3, requires_grad=True)
    old = torch.full((2, 3), NEG_INF)
    mask = torch.zeros(2, 3)
    for agg in AGG_MODES:
        loss, m = ppo_clip_loss(logp, old, torch.tensor([1.0, -1.0]), mask, agg=agg)
        loss.backward()
        assert loss.item() == 0.0 and not math.isnan(m["ratio_mean"])
        assert torch.isfinite(logp.grad).all()
        logp.grad = None


def test_empty_row_does_not_count_as_a_sequence():
    # seq-mean modes average over sequences that have tokens: a padding row changes nothing.
    logp, old, adv, mask = _hand_batch()
    pad = torch.zeros(1, 3)
    full, _ = ppo_clip_loss(logp, old, adv, mask)
    padded, _ = ppo_clip_loss(
        torch.cat([logp, pad]), torch.cat([old, pad]), torch.cat([adv, torch.ones(1)]), torch.cat([mask, pad])
    )
    assert padded.item() == pytest.approx(full.item())
    assert agg_norm(torch.cat([mask, pad]), "seq-mean-token-mean") == 2.0
    assert agg_norm(mask, "token-mean") == 5.0


@pytest.mark.parametrize("agg", AGG_MODES)
def test_micro_batches_with_norm_match_full_batch_gradient(agg):
    g = torch.Generator().manual_seed(0)
    B, T = 5, 7
    old = -torch.rand(B, T, generator=g) * 3
    logp0 = old + 0.4 * torch.randn(B, T, generator=g)  # some tokens clip, some do not
    adv = torch.tensor([1.0, -0.5, 2.0, -1.5, 0.3])
    lengths = torch.tensor([7, 3, 0, 5, 1])  # uneven lengths and one empty row
    mask = (torch.arange(T) < lengths[:, None]).float()

    full_logp = logp0.clone().requires_grad_(True)
    full_loss, _ = ppo_clip_loss(full_logp, old, adv, mask, agg=agg)
    full_loss.backward()

    micro_logp = logp0.clone().requires_grad_(True)
    norm = agg_norm(mask, agg)
    total = 0.0
    for sl in (slice(0, 2), slice(2, 5)):
        loss, _ = ppo_clip_loss(micro_logp[sl], old[sl], adv[sl], mask[sl], agg=agg, norm=norm)
        loss.backward()
        total += loss.item()

    assert total == pytest.approx(full_loss.item(), rel=1e-5, abs=1e-7)
    assert torch.allclose(micro_logp.grad, full_logp.grad, atol=1e-7)
    assert full_logp.grad.abs().sum() > 0


def test_bad_arguments_raise():
    logp, old, adv, mask = _hand_batch()
    with pytest.raises(ValueError, match="seq-mean-token-mean"):
        ppo_clip_loss(logp, old, adv, mask, agg="mean")
    with pytest.raises(ValueError):
        ppo_clip_loss(logp, old, adv, mask, dual_clip=1.0)
    with pytest.raises(ValueError):
        ppo_clip_loss(logp, old, adv[:1], mask)


def test_token_logprobs_and_entropy():
    # Uniform over 2 -> logp = -ln 2, entropy = ln 2.
    # Logits [2, 0] at temperature 2 -> [1, 0]: p1 = e/(e+1).
    logits = torch.tensor([[[0.0, 0.0], [2.0, 0.0]]])
    targets = torch.tensor([[1, 0]])
    logp, ent = token_logprobs_and_entropy(logits, targets, temperature=2.0)
    p = math.e / (math.e + 1)
    assert logp[0, 0].item() == pytest.approx(-math.log(2))
    assert logp[0, 1].item() == pytest.approx(math.log(p))
    assert ent[0, 0].item() == pytest.approx(math.log(2))
    assert ent[0, 1].item() == pytest.approx(-(p * math.log(p) + (1 - p) * math.log(1 - p)))
    assert logp.shape == ent.shape == (1, 2)


def test_chi2_token():
    # Masked log-ratios [ln 2, 0] -> ratio^2 [4, 1] -> mean 2.5 - 1 = 1.5; masked 100 ignored.
    logp = torch.tensor([[math.log(2.0), 0.0, 100.0]])
    mu = torch.zeros(1, 3)
    assert chi2_token(logp, mu, torch.tensor([[1.0, 1.0, 0.0]])) == pytest.approx(1.5)
    # The log-ratio is clamped at 20 before exponentiation.
    assert chi2_token(logp, mu, torch.tensor([[0.0, 0.0, 1.0]])) == pytest.approx(math.exp(40) - 1, rel=1e-4)
    assert math.isnan(chi2_token(logp, mu, torch.zeros(1, 3)))


def test_training_ppl():
    # seq0 mean logp -2 -> e^2; seq1 mean -ln 4 -> 4; seq2 has no tokens and is skipped.
    logp = torch.tensor([[-1.0, -3.0], [-math.log(4.0), -50.0], [-9.0, -9.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    assert training_ppl(logp, mask) == pytest.approx((math.exp(2) + 4) / 2)
    assert math.isnan(training_ppl(logp, torch.zeros(3, 2)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_blockwise_logprobs_match_the_plain_form_in_value_and_gradient(monkeypatch, dtype, temperature):
    """The block-at-a-time log-prob (no vocabulary-sized intermediates) is the plain
    log_softmax's, value and gradient, across block edges; its entropy carries no gradient."""
    import rolecall.loss.stats as stats

    monkeypatch.setattr(stats, "_BLOCK_ELEMENTS", 3 * 50)  # blocks of 3 rows: 7 rows end mid-block
    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(1, 7, 50, generator=g) * 4).to(dtype).requires_grad_(True)
    targets = torch.randint(0, 50, (1, 7), generator=g)
    weights = torch.randn(1, 7, generator=g)
    plain_lp, plain_ent = stats.token_logprobs_and_entropy(logits, targets, temperature, entropy_grad=True)
    (plain_grad,) = torch.autograd.grad((plain_lp * weights).sum(), logits)
    lp, ent = stats.token_logprobs_and_entropy(logits, targets, temperature, entropy_grad=False)
    (grad,) = torch.autograd.grad((lp * weights).sum(), logits)
    tol = 1e-6 if dtype == torch.float32 else 1e-2
    assert torch.allclose(lp, plain_lp, atol=1e-5) and torch.allclose(ent, plain_ent.detach(), atol=1e-5)
    assert grad.dtype == dtype and torch.allclose(grad.float(), plain_grad.float(), atol=tol)
    assert not ent.requires_grad
    assert torch.allclose(stats.token_logprobs(logits, targets, temperature), plain_lp, atol=1e-5)


def test_blockwise_logprobs_pass_torch_gradcheck():
    import rolecall.loss.stats as stats

    logits = torch.randn(5, 11, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 11, (5,))
    # float32 inside: gradcheck's float64 tolerance does not apply, so compare with its own numerics
    torch.autograd.gradcheck(lambda x: stats._TemperedLogprob.apply(x, targets, 0.7)[0].double(), (logits,),
                             eps=1e-3, atol=1e-3, rtol=1e-3)
