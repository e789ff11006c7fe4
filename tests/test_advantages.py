"""Advantage estimators against hand-computed values."""
from __future__ import annotations

import math

import pytest

from rolecall.advantages import ESTIMATORS, get_estimator
from rolecall.advantages.base import group_normalize

EPS = 1e-6


def test_registry_names_and_group_keys():
    # the shipped ones, each under its name and grouping; an estimator added as a file joins the registry freely
    shipped = {"grpo": "slot", "agentwise": "role", "turnwise": "turn", "drgrpo": "slot", "rloo": "slot",
               "softrank": "slot", "counterfactual": "role"}
    assert {name: ESTIMATORS[name].default_group_by for name in shipped} == shipped
    assert all(get_estimator(name).name == name for name in ESTIMATORS)


def test_unknown_estimator_names_bad_and_allowed():
    with pytest.raises(ValueError, match="nope") as exc:
        get_estimator("nope")
    assert "agentwise" in str(exc.value) and "grpo" in str(exc.value)


def test_grpo_single_group_hand_computed():
    # mean = 0.5; unbiased var = 4 * 0.25 / 3 = 1/3; std = 0.57735...
    adv, m = get_estimator("grpo").compute([1.0, 0.0, 1.0, 0.0], ["g"] * 4)
    a = 0.5 / (math.sqrt(1 / 3) + EPS)
    assert adv == pytest.approx([a, -a, a, -a], rel=1e-12)
    assert all(type(x) is float for x in adv)
    assert m["groups"] == 1 and m["mixed_group_frac"] == 1.0 and m["unscorable"] == 0
    assert m["adv_mean"] == pytest.approx(0.0, abs=1e-12)
    assert m["adv_abs_mean"] == pytest.approx(a)


def test_interleaved_groups_use_ids_not_order():
    # Group a = [1, 0, 0] (indices 0, 2, 4): mean 1/3, var = (4/9 + 1/9 + 1/9)/2 = 1/3.
    # Group b = [2, 4]   (indices 1, 3):     mean 3,   var = (1 + 1)/1 = 2.
    rewards = [1.0, 2.0, 0.0, 4.0, 0.0]
    ids = ["a", "b", "a", "b", "a"]
    adv, m = get_estimator("grpo").compute(rewards, ids)
    sa, sb = math.sqrt(1 / 3) + EPS, math.sqrt(2) + EPS
    assert adv == pytest.approx([(2 / 3) / sa, -1 / sb, (-1 / 3) / sa, 1 / sb, (-1 / 3) / sa])
    assert m["groups"] == 2

    # Same rewards, permuted together with their ids: each turn keeps its advantage.
    perm = [4, 1, 0, 3, 2]
    adv_p, _ = get_estimator("grpo").compute([rewards[i] for i in perm], [ids[i] for i in perm])
    assert adv_p == pytest.approx([adv[i] for i in perm])


def test_singleton_and_uniform_groups_get_zero():
    adv, m = get_estimator("grpo").compute([1.0, 1.0, 1.0, 0.7], [("p", "x")] * 3 + [("p", "y")])
    assert adv == [0.0, 0.0, 0.0, 0.0]
    assert m["groups"] == 2 and m["mixed_group_frac"] == 0.0


def test_unscorable_excluded_zeroed_and_counted():
    # Scorable members of g: [1, 0] -> mean 0.5, std = sqrt(0.5) (unbiased, n=2).
    adv, m = get_estimator("grpo").compute([1.0, None, 0.0, None], ["g", "g", "g", "h"])
    a = 0.5 / (math.sqrt(0.5) + EPS)
    assert adv == pytest.approx([a, 0.0, -a, 0.0])
    assert adv[1] == 0.0 and adv[3] == 0.0
    assert m["unscorable"] == 2 and m["groups"] == 2
    # Group h has no scorable members, so it is not mixed: 1 of 2 groups.
    assert m["mixed_group_frac"] == 0.5


def test_group_with_one_scorable_member_is_zero():
    adv, _ = get_estimator("grpo").compute([1.0, None, None], ["g"] * 3)
    assert adv == [0.0, 0.0, 0.0]


def test_voting_example_agentwise_vs_grpo():
    # One problem, G = 2 samples of a voting workflow: generator0..2 then aggregator.
    # sample 0: gens [1, 1, 0], agg 1;  sample 1: gens [0, 0, 0], agg 0.
    slots = ["generator0", "generator1", "generator2", "aggregator"] * 2
    roles = ["generator", "generator", "generator", "aggregator"] * 2
    rewards = [1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    grpo, agentwise = get_estimator("grpo"), get_estimator("agentwise")
    adv_g, m_g = grpo.compute(rewards, [("p", s) for s in slots])
    adv_a, m_a = agentwise.compute(rewards, [("p", r) for r in roles])

    # GRPO per slot: pairs [1,0] -> +-0.5/sqrt(.5); generator2 pair [0,0] -> 0.
    s = 0.5 / (math.sqrt(0.5) + EPS)
    assert adv_g == pytest.approx([s, s, 0.0, s, -s, -s, 0.0, -s])
    assert m_g["groups"] == 4 and m_g["mixed_group_frac"] == 0.75

    # Agent-wise generator group [1,1,0,0,0,0]: mean 1/3, var = (2*4/9 + 4*1/9)/5 = 4/15.
    # Aggregator group [1, 0] as in GRPO.
    sg = math.sqrt(4 / 15) + EPS
    hi, lo = (2 / 3) / sg, (-1 / 3) / sg
    assert adv_a == pytest.approx([hi, hi, lo, s, lo, lo, lo, -s])
    assert m_a["groups"] == 2 and m_a["mixed_group_frac"] == 1.0
    assert adv_a[2] != adv_g[2]


def test_rejects_mismatched_lengths_and_nan():
    with pytest.raises(ValueError):
        group_normalize([1.0, 0.0], ["g"])
    with pytest.raises(ValueError, match="not finite"):
        group_normalize([float("nan"), 0.0], ["g", "g"])


def test_empty_input():
    adv, m = get_estimator("agentwise").compute([], [])
    assert adv == [] and m["groups"] == 0 and m["adv_abs_mean"] == 0.0


# --- drgrpo, rloo, softrank, turnwise -------------------------------------------------------

def test_drgrpo_is_mean_centred_without_std():
    adv, _ = get_estimator("drgrpo").compute([1.0, 0.0, 0.0, 0.0, 5.0], ["g"] * 4 + ["h"])
    assert adv == pytest.approx([0.75, -0.25, -0.25, -0.25, 0.0])


def test_rloo_subtracts_the_mean_of_the_others():
    adv, _ = get_estimator("rloo").compute([1.0, 0.0, 0.0, 2.0], ["g"] * 4)
    assert adv == pytest.approx([1 - 2 / 3, 0 - 1, 0 - 1, 2 - 1 / 3])
    # K/(K-1) times the mean-centred reward
    dr, _ = get_estimator("drgrpo").compute([1.0, 0.0, 0.0, 2.0], ["g"] * 4)
    assert adv == pytest.approx([a * 4 / 3 for a in dr])


@pytest.mark.parametrize("name", ["rloo", "drgrpo", "grpo", "softrank", "turnwise", "agentwise"])
def test_a_constant_group_gets_zero_and_unscorable_members_are_left_out(name):
    est = get_estimator(name)
    adv, m = est.compute([0.7, 0.7, 0.7], ["g"] * 3)
    assert adv == [0.0, 0.0, 0.0]
    adv, m = est.compute([1.0, None, 0.0, None], ["g", "g", "g", "h"])
    assert adv[1] == adv[3] == 0.0 and adv[0] > 0 > adv[2] and m["unscorable"] == 2


def test_agentwise_equals_grpo_with_one_role():
    rewards = [1.0, 0.0, 0.3, 0.9, 0.2, 0.2]
    ids = [("p", "generator")] * 3 + [("q", "generator")] * 3
    assert get_estimator("agentwise").compute(rewards, ids) == get_estimator("grpo").compute(rewards, ids)


def test_softrank_hand_computed_with_ties_averaged():
    from statistics import NormalDist, fmean, stdev

    tau = 0.5
    adv, _ = get_estimator("softrank", {"tau": tau}).compute([0.0, 1.0, 1.0, 3.0], ["g"] * 4)
    ranks = [0, 1.5, 1.5, 3]
    raw = [NormalDist().inv_cdf(((r + 0.5) / 4) ** tau) for r in ranks]
    want = [(x - fmean(raw)) / (stdev(raw) + EPS) for x in raw]
    assert adv == pytest.approx(want)
    assert adv[1] == adv[2], "tied rewards get equal advantages"


@pytest.mark.parametrize("k", [2, 3, 5, 8, 16, 64])
@pytest.mark.parametrize("tau", [0.4, 0.5, 1.0, 2.0, 5.0])
def test_softrank_zero_mean_affine_invariant_and_variance_within_theorem_1(k, tau):
    import random
    from statistics import pvariance

    rng = random.Random(k * 100 + int(tau * 10))
    rewards = rng.sample(range(-1000, 1000), k)  # distinct
    est = get_estimator("softrank", {"tau": tau})
    adv, _ = est.compute([float(r) for r in rewards], ["g"] * k)
    assert sum(adv) / k == pytest.approx(0.0, abs=1e-9)
    lo, hi = 1 - 1 / (k - 1), 1 + 1 / (k - 1)
    assert lo - 1e-6 <= pvariance(adv) <= hi + 1e-6
    for a, b in ((3.0, -7.0), (0.001, 1e6)):  # a * R + b, a > 0
        scaled, _ = est.compute([a * r + b for r in rewards], ["g"] * k)
        assert scaled == pytest.approx(adv)
    order = sorted(range(k), key=rewards.__getitem__)
    assert [adv[i] for i in order] == sorted(adv), "the order of the rewards is kept"


def test_turnwise_groups_by_turn_index_and_role():
    from rolecall.algo.credit import group_id
    from rolecall.types import Episode, Problem, Turn

    ep = Episode(problem=Problem(uid="p", prompt="", answer=""), turns=[], final_answer="", sample=0)
    draft = Turn(role="generator", slot="generator", policy="g", prompt_text="", completion_text="", index=0)
    revision = Turn(role="generator", slot="generator", policy="g", prompt_text="", completion_text="", index=2)
    assert group_id(ep, draft, "slot") == group_id(ep, revision, "slot")
    assert group_id(ep, draft, "turn") != group_id(ep, revision, "turn")


def test_estimator_options_are_validated():
    assert get_estimator("softrank", {"tau": 0.8}).tau == 0.8
    assert get_estimator("grpo", {"eps": 1e-3}).eps == 1e-3
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['temperature'\] for 'softrank'; allowed: \['eps', 'tau'\]"):
        get_estimator("softrank", {"temperature": 0.8})
    with pytest.raises(ValueError, match="tau: must be > 0"):
        get_estimator("softrank", {"tau": 0})
    with pytest.raises(ValueError, match="allowed: none"):
        get_estimator("rloo", {"eps": 1.0})


def test_dry_run_lists_every_estimator_with_its_options():
    from typer.testing import CliRunner

    from rolecall.cli import app

    res = CliRunner().invoke(app, ["train", "--dry-run", "--show-config", "algo.estimator=softrank",
                                   "algo.estimator_options={tau: 0.8}"])
    assert res.exit_code == 0, res.output
    for name in ESTIMATORS:
        assert f"estimator {name}" in res.output
    assert "* estimator softrank   groups by slot  (options, defaults: tau=0.5, eps=1e-06)" in res.output
    assert "estimator_options:\n    tau: 0.8" in res.output
