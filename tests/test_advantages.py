"""Advantage estimators against hand-computed values."""
from __future__ import annotations

import math

import pytest

from rolecall.advantages import ESTIMATORS, get_estimator
from rolecall.advantages.base import group_normalize

EPS = 1e-6


def test_registry_names_and_group_keys():
    assert set(ESTIMATORS) == {"grpo", "agentwise"}
    assert get_estimator("grpo").default_group_by == "slot"
    assert get_estimator("agentwise").default_group_by == "role"
    assert get_estimator("grpo").name == "grpo"


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
