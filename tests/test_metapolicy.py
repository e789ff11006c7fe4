"""Meta-policy (MPDF): self-report parsing, state features, the attention network, SFT,
SoftRankPO (Theorem 2's closed-form optimum) and bit-identical kill-and-resume."""
from __future__ import annotations

import copy
import math
import random

import pytest
import torch
from torch import nn

from rolecall.advantages.softrank import softrank
from rolecall.metapolicy import (
    ACTIONS,
    CONCEDE,
    FEATURES,
    PERSIST,
    REFINE,
    STATE_DIM,
    AgentState,
    Corpus,
    MetaPolicy,
    collate,
    epoch_order,
    features,
    fit,
    load_checkpoint,
    make_optimizer,
    parse_profile,
    round_features,
    save_checkpoint,
    sft_loss,
    softrank_advantages,
    softrank_loss,
    softrank_objective,
)

F = {name: i for i, name in enumerate(FEATURES)}


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """These tensors are tiny: a second thread only adds sync cost, and on a busy machine a lot of it."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ---------------------------------------------------------------- parsing


def test_parse_profile_full_report():
    text = ("<think>maybe \\boxed{7}</think>We add them, \\boxed{\\frac{1}{2}} is wrong... so \\boxed{\\frac{3}{4}}\n"
            "Steps: 3\nOperations: 2\nConfidence: 0.8\n")
    assert parse_profile(text) == AgentState(answer="\\frac{3}{4}", steps=3, confidence=0.8, operations=2)


@pytest.mark.parametrize("line, expected", [
    ("Confidence: 80%", 0.8), ("confidence = 8/10", 0.8), ("**CONFIDENCE:** .25", 0.25),
    ("Confidence: 1.7", 1.0), ("Confidence: -0.3", 0.0), ("Confidence: 250 %", 1.0),
    ("Confidence: high", None), ("Confidence: 3/0", None), ("Confidence:", None),
])
def test_parse_profile_confidence_forms(line, expected):
    got = parse_profile(f"\\boxed{{1}}\n{line}\n").confidence
    assert got == pytest.approx(expected) if expected is not None else got is None


def test_parse_profile_missing_and_garbage_never_raise():
    assert parse_profile("") == AgentState()
    assert parse_profile(None) == AgentState()  # type: ignore[arg-type]
    assert parse_profile("no box, no report") == AgentState()
    # An unclosed last box is skipped: the answer is the last balanced one.
    assert parse_profile("\\boxed{5} then \\boxed{6").answer == "5"
    assert parse_profile("\\boxed{  }\nSteps: 2").answer is None
    odd = parse_profile("\\boxed{x}\nsteps: three\nOperations: 2.5\nConfidence: 0.4\nSteps: -1")
    assert odd == AgentState(answer="x", steps=None, confidence=0.4, operations=None)
    # The last report wins; "3." (a sentence's full stop) still reads as 3.
    assert parse_profile("Steps: 9\n\\boxed{1}\n- steps: 3.\nOPERATIONS: 4 ops").steps == 3
    assert parse_profile("Steps: 9\n\\boxed{1}\n- steps: 3.\nOPERATIONS: 4 ops").operations == 4
    assert parse_profile("\\boxed{1}\n" + "\x00\xff{}}}%%%\n" * 20).answer == "1"


# ---------------------------------------------------------------- features


def test_features_three_agents_by_hand():
    me = AgentState(answer="42", steps=3, confidence=0.9, operations=20, critic=True)
    same = AgentState(answer=" 4 2 ", steps=None, confidence=None, operations=1)  # whitespace-equal to mine
    other = AgentState(answer="7", steps=15, confidence=0.2, operations=None, critic=False)
    own, peers = features(me, [same, other])
    assert len(own) == STATE_DIM == len(FEATURES) and len(peers) == 2 and all(len(p) == STATE_DIM for p in peers)

    # ... agreement features, then the critic's verdict (0.5 and missing when nobody judged)
    assert own == pytest.approx([1, 0.9, 0, 0.3, 0, 1.0, 0, 0.5, 1, 2 / 3, 1, 1, 0])
    assert peers[0] == pytest.approx([1, 0.5, 1, 0, 1, 0.1, 0, 0.5, 1, 2 / 3, 1, 0.5, 1])
    assert peers[1] == pytest.approx([1, 0.2, 0, 1.0, 0, 0, 1, 0.0, 0, 1 / 3, 0, 0, 0])
    # Swapping the point of view: "other" now owns, and nobody agrees with it.
    own2, peers2 = features(other, [me, same])
    assert own2[F["peer_agreement"]] == 0 and own2[F["is_plurality"]] == 0
    assert [p[F["agrees_with_own"]] for p in peers2] == [0, 0]


def test_features_ties_no_answers_and_alone():
    a, b = AgentState(answer="1"), AgentState(answer="2")
    own, peers = features(a, [b])
    assert own[F["is_plurality"]] == 1 and peers[0][F["is_plurality"]] == 1  # a tie: both are plurality
    blank = AgentState()
    own, peers = features(blank, [blank])
    assert own[F["has_answer"]] == 0 and own[F["peer_agreement"]] == 0 and own[F["agrees_with_own"]] == 0
    assert own[F["is_plurality"]] == 0 and own[F["group_share"]] == 0 and own[F["confidence"]] == 0.5
    own, peers = features(a, [])
    assert peers == [] and own[F["peer_agreement"]] == 0 and own[F["group_share"]] == 1
    assert [len(p) for _, p in round_features([a, b, blank])] == [2, 2, 2]


# ---------------------------------------------------------------- network


def _batch(b: int, p: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(b, STATE_DIM, generator=g), torch.rand(b, p, STATE_DIM, generator=g)


def test_network_shapes_zero_peers_and_size():
    torch.manual_seed(0)
    net = MetaPolicy()
    own, peers = _batch(5, 3)
    assert net(own, peers).shape == (5, len(ACTIONS))
    alone = net(own, peers[:, :0])
    assert alone.shape == (5, 3) and torch.isfinite(alone).all()
    all_masked = net(own, peers, torch.ones(5, 3, dtype=torch.bool))
    assert torch.allclose(all_masked, alone, atol=1e-6)  # every peer absent == no peers
    assert sum(p.numel() for p in net.parameters()) < 10_000
    torch.manual_seed(0)
    twin = MetaPolicy()
    assert all(torch.equal(x, y) for x, y in zip(net.state_dict().values(), twin.state_dict().values()))
    with pytest.raises(ValueError, match="expected own"):
        net(own[:, :4], peers)


def test_network_mask_respected():
    torch.manual_seed(0)
    net = MetaPolicy()
    own, peers = _batch(4, 3)
    mask = torch.tensor([[False, True, True], [False, False, True], [False, False, False], [True, True, True]])
    out = net(own, peers, mask)
    junk = peers.clone()
    junk[mask] = torch.randn(int(mask.sum()), STATE_DIM) * 100
    junk[0, 2, 0] = float("nan")
    assert torch.equal(net(own, junk, mask), out)  # absent peers cannot matter, even as NaN
    nudged = peers.clone()
    nudged[2, 1] += 1.0  # a present peer must matter
    assert not torch.allclose(net(own, nudged, mask)[2], out[2])
    # Padding is invisible: row 0 with its one peer alone equals row 0 padded to three.
    assert torch.allclose(net(own[:1], peers[:1, :1]), out[:1], atol=1e-6)


# ---------------------------------------------------------------- synthetic data


def _random_round(rng: random.Random) -> list[AgentState]:
    return [AgentState(answer=rng.choice(["1", "2", "3", None]), steps=rng.choice([None, 1, 3, 12]),
                       confidence=rng.choice([None, 0.1, 0.3, 0.6, 0.7, 0.9, 1.0]),
                       operations=rng.choice([None, 0, 2, 5])) for _ in range(rng.randint(1, 4))]


def _oracle(own: AgentState, peers: list[AgentState]) -> int:
    """Concede to a confident dissenting peer; else persist when confident, refine when not."""
    conf = lambda s: 0.5 if s.confidence is None else s.confidence  # noqa: E731
    if any(p.answer is not None and p.answer != own.answer and conf(p) >= 0.8 for p in peers):
        return CONCEDE
    return PERSIST if conf(own) >= 0.5 else REFINE


def _labelled(n_rounds: int, seed: int) -> Corpus:
    rng = random.Random(seed)
    rows, labels = [], []
    for _ in range(n_rounds):
        states = _random_round(rng)
        for i, row in enumerate(round_features(states)):
            rows.append(row)
            labels.append(_oracle(states[i], states[:i] + states[i + 1:]))
    return collate(rows, labels=labels)


def _accuracy(net: nn.Module, data: Corpus) -> float:
    return float((net.probs(data.own_B_D, data.peers_B_P_D, data.peer_mask_B_P).argmax(-1) == data.labels_B)
                 .float().mean())


@pytest.fixture(scope="module")
def sft_policy() -> MetaPolicy:
    torch.manual_seed(0)
    net = MetaPolicy()
    fit(net, sft_loss, _labelled(600, seed=1), epochs=25, batch_size=64, lr=1e-2, seed=0)
    return net


def test_sft_learns_the_oracle_rule(sft_policy):
    held_out = _labelled(300, seed=2)
    assert {int(x) for x in held_out.labels_B.unique()} == {PERSIST, REFINE, CONCEDE}
    assert _accuracy(sft_policy, held_out) > 0.95


# ---------------------------------------------------------------- SoftRankPO


class FreeLogits(nn.Module):
    """One state's logits as free parameters, ignoring the inputs (for closed-form checks)."""

    def __init__(self, logits_A: list[float]) -> None:
        super().__init__()
        self.logits_A = nn.Parameter(torch.tensor(logits_A))

    def forward(self, own_B_D, peers_B_P_D, peer_mask_B_P=None):
        return self.logits_A.expand(own_B_D.shape[0], -1)


def _one_state(rewards: list[float]) -> Corpus:
    return Corpus(torch.zeros(1, STATE_DIM), torch.zeros(1, 0, STATE_DIM), torch.zeros(1, 0, dtype=torch.bool),
                  rewards_B_A=torch.tensor([rewards]))


def test_softrank_advantages_equal_reference():
    rewards = [[0.2, 1.0, 0.5], [1.0, 1.0, 0.0], [3.0, 3.0, 3.0], [-5.0, 2.0, 2.0]]
    got = softrank_advantages(torch.tensor(rewards, dtype=torch.float64), tau=0.7)
    assert torch.allclose(got, torch.tensor([softrank(r, 0.7) for r in rewards], dtype=torch.float64))
    assert got[2].abs().max() == 0 and torch.allclose(got.sum(-1), torch.zeros(4, dtype=torch.float64), atol=1e-9)


def _grad(rewards_B_A: torch.Tensor) -> torch.Tensor:
    torch.manual_seed(3)
    net, ref = MetaPolicy(), MetaPolicy()
    own, peers = _batch(6, 2, seed=4)
    loss, _ = softrank_loss(net, ref, Corpus(own, peers, torch.zeros(6, 2, dtype=torch.bool), rewards_B_A=rewards_B_A))
    loss.backward()
    return torch.cat([p.grad.flatten() for p in net.parameters()])


def test_softrank_loss_gradient_invariant_to_affine_reward_rescaling():
    rewards = torch.rand(6, 3, generator=torch.Generator().manual_seed(5))
    base = _grad(rewards)
    assert base.norm() > 0
    assert torch.equal(_grad(7.5 * rewards - 3.0), base)  # only the ranks reach the loss
    reordered = _grad(rewards.flip(-1))
    assert torch.nn.functional.cosine_similarity(reordered, base, dim=0) < 0.99


@pytest.mark.parametrize("beta", [1.0, 0.1])
def test_theorem2_minimiser_is_ref_tilted_by_exp_advantage(beta):
    rewards, ref_logits = [0.2, 1.0, 0.5], [0.5, -0.3, 0.1]
    data, ref = _one_state(rewards), FreeLogits(ref_logits).requires_grad_(False)
    policy = FreeLogits([0.0, 0.0, 0.0])
    # The loss is a convex quadratic in the logits: L-BFGS reaches its minimum to round-off.
    opt = torch.optim.LBFGS(policy.parameters(), lr=1.0, max_iter=500, tolerance_grad=1e-12,
                            tolerance_change=1e-14, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss, _ = softrank_loss(policy, ref, data, tau=0.5, beta=beta, lam=0.0)
        loss.backward()
        return loss

    opt.step(closure)
    _, metrics = softrank_loss(policy, ref, data, tau=0.5, beta=beta, lam=0.0)
    adv = torch.tensor(softrank(rewards, 0.5))
    target = (torch.tensor(ref_logits).log_softmax(-1) + adv / beta).softmax(-1)
    got = policy.logits_A.detach().softmax(-1)
    assert torch.allclose(got, target, atol=1e-3), (got, target)
    implicit = beta * (got.log() - torch.tensor(ref_logits).log_softmax(-1))
    assert torch.allclose(implicit - implicit.mean(), adv, atol=1e-4)
    assert metrics["rank_loss"] < 1e-6 and ref.logits_A.grad is None


def test_entropy_bonus_raises_entropy():
    data, ref = _one_state([0.2, 1.0, 0.5]), FreeLogits([0.0, 0.0, 0.0]).requires_grad_(False)
    entropy = {}
    for lam in (0.0, 0.2):
        policy = FreeLogits([0.0, 0.0, 0.0])
        opt = torch.optim.Adam(policy.parameters(), lr=0.05)
        for _ in range(600):
            loss, metrics = softrank_loss(policy, ref, data, beta=0.5, lam=lam)
            opt.zero_grad()
            loss.backward()
            opt.step()
        entropy[lam] = metrics["entropy"]
    assert entropy[0.2] > entropy[0.0] + 0.05, entropy


def _rewards_refine_best(data: Corpus, seed: int) -> Corpus:
    g = torch.Generator().manual_seed(seed)
    rewards_B_A = torch.rand(len(data), len(ACTIONS), generator=g) * 0.9
    rewards_B_A[:, REFINE] = 1.0
    return Corpus(data.own_B_D, data.peers_B_P_D, data.peer_mask_B_P, rewards_B_A=rewards_B_A)


def test_softrankpo_raises_the_always_best_action_over_the_sft_reference(sft_policy):
    ref = copy.deepcopy(sft_policy).requires_grad_(False).eval()
    policy = copy.deepcopy(sft_policy)
    # Default beta = 0.1: exp(A/beta) outweighs the confident SFT reference (Theorem 2), so the
    # optimum puts most mass on refine; a large beta would keep the policy near the reference.
    result = fit(policy, softrank_objective(ref), _rewards_refine_best(_labelled(150, seed=3), 0),
                 epochs=10, batch_size=64, lr=1e-2, seed=0)
    held_out = _labelled(100, seed=4)
    args = (held_out.own_B_D, held_out.peers_B_P_D, held_out.peer_mask_B_P)
    before, after = ref.probs(*args)[:, REFINE].mean(), policy.probs(*args)[:, REFINE].mean()
    assert before < 0.5 and after > 0.9, (before, after)
    assert result.history[-1]["kl_ref"] > 0 and all(math.isfinite(m["loss"]) for m in result.history)
    assert all(torch.equal(a, b) for a, b in zip(ref.parameters(), sft_policy.parameters()))  # ref frozen


# ---------------------------------------------------------------- resumable training


def test_epoch_order_is_a_pure_function_of_seed_and_epoch():
    assert torch.equal(epoch_order(50, 3, 1), epoch_order(50, 3, 1))
    assert not torch.equal(epoch_order(50, 3, 1), epoch_order(50, 3, 2))
    assert not torch.equal(epoch_order(50, 3, 1), epoch_order(50, 4, 1))
    assert sorted(epoch_order(50, 3, 1).tolist()) == list(range(50))


@pytest.mark.parametrize("objective", ["sft", "softrank"])
def test_kill_and_resume_is_bit_identical(tmp_path, objective):
    labelled = _labelled(20, seed=5)  # not a multiple of the batch size: a short last batch
    data = labelled if objective == "sft" else _rewards_refine_best(labelled, 1)
    torch.manual_seed(11)
    ref = MetaPolicy().requires_grad_(False)
    loss_fn = sft_loss if objective == "sft" else softrank_objective(ref, lam=0.05)
    kw = dict(epochs=3, batch_size=8, lr=1e-2, seed=7)

    def fresh(seed: int) -> MetaPolicy:
        torch.manual_seed(seed)
        return MetaPolicy()

    straight = fresh(0)
    total = fit(straight, loss_fn, data, **kw).step
    kill_at = total // 2 + 1  # mid-epoch
    assert 0 < kill_at % math.ceil(len(data) / 8)

    first = fresh(0)
    ckpt = tmp_path / "ckpt" / "meta.pt"

    def kill(step: int, policy: nn.Module, optimizer: torch.optim.Optimizer, metrics: dict) -> bool:
        if step == kill_at:
            save_checkpoint(ckpt, policy, optimizer, step)
        return step == kill_at

    stopped = fit(first, loss_fn, data, **kw, on_step=kill)
    assert stopped.step == kill_at and ckpt.exists() and not list(ckpt.parent.glob(".tmp-*"))

    resumed = fresh(99)  # different init: everything must come from the checkpoint
    optimizer = make_optimizer(resumed, lr=1e-2)
    step = load_checkpoint(ckpt, resumed, optimizer)
    assert step == kill_at
    done = fit(resumed, loss_fn, data, **kw, start_step=step, state=optimizer.state_dict())
    assert done.step == total
    for (name, a), b in zip(straight.named_parameters(), resumed.parameters()):
        assert torch.equal(a, b), name


@pytest.fixture
def checkpoint(tmp_path):
    torch.manual_seed(0)
    net = MetaPolicy()
    opt = fit(net, sft_loss, _labelled(5, seed=6), epochs=1, batch_size=4, lr=1e-3, seed=0).optimizer
    return save_checkpoint(tmp_path / "meta.pt", net, opt, 12, {"note": "x"}), net


@pytest.mark.parametrize("where", [0, 40, 60, "middle", -1])
def test_damaged_checkpoint_is_refused_naming_the_file(checkpoint, where):
    path, net = checkpoint
    data = bytearray(path.read_bytes())
    i = len(data) // 2 if where == "middle" else where
    data[i] ^= 0x20
    path.write_bytes(bytes(data))
    fresh = MetaPolicy()
    before = copy.deepcopy(fresh.state_dict())
    with pytest.raises(ValueError, match="meta.pt"):
        load_checkpoint(path, fresh, make_optimizer(fresh, 1e-3))
    assert all(torch.equal(before[k], v) for k, v in fresh.state_dict().items())  # nothing half-loaded


def test_checkpoint_round_trip_truncation_and_wrong_shape(checkpoint):
    path, net = checkpoint
    fresh = MetaPolicy()
    assert load_checkpoint(path, fresh, make_optimizer(fresh, 1e-3)) == 12
    assert all(torch.equal(a, b) for a, b in zip(net.parameters(), fresh.parameters()))
    narrow = MetaPolicy(hidden=16)
    with pytest.raises(ValueError, match="does not fit"):
        load_checkpoint(path, narrow, make_optimizer(narrow, 1e-3))
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(ValueError, match=r"meta\.pt is damaged"):
        load_checkpoint(path, fresh, make_optimizer(fresh, 1e-3))
    with pytest.raises(ValueError, match="nope.pt"):
        load_checkpoint(path.with_name("nope.pt"), fresh, make_optimizer(fresh, 1e-3))


def test_corpus_and_fit_reject_bad_input():
    with pytest.raises(ValueError, match="needs labels_B"):
        collate([([0.0] * STATE_DIM, [])])
    with pytest.raises(ValueError, match="non-finite"):
        collate([([0.0] * STATE_DIM, [])], rewards=[[0.0, float("nan"), 1.0]])
    with pytest.raises(ValueError, match="labels_B must index"):
        collate([([0.0] * STATE_DIM, [])], labels=[3])
    data = _labelled(3, seed=0)
    with pytest.raises(ValueError, match="start_step"):
        fit(MetaPolicy(), sft_loss, data, epochs=1, batch_size=4, lr=1e-3, seed=0, start_step=5)
