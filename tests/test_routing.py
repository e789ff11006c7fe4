"""Routing tables: role -> policy maps, trainable/frozen adapters, and their validation errors."""
from __future__ import annotations

import pytest

from rolecall.policies.routing import BASE_POLICY, SHARED_POLICY, build_routing

VOTING = ("generator", "aggregator")
ORCH = ("orchestrator", "worker", "synthesizer")


def test_isolated_gives_each_role_its_own_trainable_adapter():
    r = build_routing("isolated", ORCH)
    assert r.routes == {"orchestrator": "orchestrator", "worker": "worker", "synthesizer": "synthesizer"}
    assert r.trainable == ("orchestrator", "synthesizer", "worker")  # fixed (sorted) order
    assert r.frozen == ()
    assert r.adapters == r.trainable


def test_shared_routes_every_role_to_one_adapter():
    r = build_routing("shared", ORCH)
    assert r.routes == {role: SHARED_POLICY for role in ORCH}
    assert r.trainable == (SHARED_POLICY,) and r.frozen == ()


def test_explicit_map_with_shared_adapter_between_two_roles():
    r = build_routing({"orchestrator": "plan", "worker": "solve", "synthesizer": "plan"}, ORCH)
    assert r.routes["synthesizer"] == "plan"
    assert r.trainable == ("plan", "solve")


def test_base_policy_is_no_adapter():
    """A role routed to `base` uses the bare base model: it creates no adapter at all."""
    r = build_routing({"generator": "gen", "aggregator": BASE_POLICY}, VOTING)
    assert r.routes["aggregator"] == "base"
    assert r.adapters == ("gen",)


def test_policy_table_marks_frozen_adapters():
    r = build_routing({"generator": "gen", "aggregator": "agg"}, VOTING, {"gen": True, "agg": False})
    assert r.trainable == ("gen",)
    assert r.frozen == ("agg",)
    assert r.adapters == ("gen", "agg")


def test_isolated_with_policy_table():
    r = build_routing("isolated", VOTING, {"generator": False, "aggregator": True})
    assert r.trainable == ("aggregator",) and r.frozen == ("generator",)


def test_missing_role_is_named():
    with pytest.raises(ValueError, match=r"routing: role\(s\) \['aggregator'\] have no policy"):
        build_routing({"generator": "g"}, VOTING)


def test_extra_role_is_named():
    with pytest.raises(ValueError, match=r"routing: \['judge'\] are not roles"):
        build_routing({"generator": "g", "aggregator": "a", "judge": "j"}, VOTING)


def test_route_to_undefined_policy():
    with pytest.raises(ValueError, match=r"routing: .*aggregator -> a.*do not exist") as e:
        build_routing({"generator": "g", "aggregator": "a"}, VOTING, {"g": True})
    assert "['g']" in str(e.value)


def test_isolated_needs_a_policy_per_role_when_a_table_is_given():
    with pytest.raises(ValueError, match="routing: .*worker -> worker"):
        build_routing("isolated", ORCH, {"orchestrator": True, "synthesizer": True})


@pytest.mark.parametrize("spec", ["Isolated", "per-role", 3, None])
def test_unknown_spec_is_rejected(spec):
    with pytest.raises(ValueError, match="routing: expected 'isolated', 'shared'"):
        build_routing(spec, VOTING)


@pytest.mark.parametrize("bad", ["", "  ", 3])
def test_policy_names_must_be_nonempty_strings(bad):
    with pytest.raises(ValueError, match="routing: policy names"):
        build_routing({"generator": bad, "aggregator": "a"}, VOTING)


def test_base_cannot_be_declared_as_a_policy():
    with pytest.raises(ValueError, match="'base' is reserved"):
        build_routing({"generator": "g", "aggregator": "base"}, VOTING, {"g": True, "base": False})
