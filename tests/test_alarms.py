"""Alarms fire on planted drift streams, once each, and stay silent on clean streams."""
from __future__ import annotations

import math
import random

from rolecall.diagnostics.alarms import AlarmMonitor, AlarmThresholds

IP_VOTING = {"generator": ["generator"], "aggregator": ["aggregator"]}
SP_VOTING = {"shared": ["generator", "aggregator"]}


def _row(step, gen_ppl=1.5, agg_ppl=1.5, gen_chi2=0.01, agg_chi2=0.01, gen_len=40.0, agg_len=4.0,
         agg_terse=0.9, noise=0.0, rng=None):
    j = (lambda: rng.uniform(-noise, noise)) if rng else (lambda: 0.0)
    return {"step": step,
            "role/generator/training_ppl": gen_ppl * (1 + j()), "role/aggregator/training_ppl": agg_ppl * (1 + j()),
            "role/generator/chi2_token": gen_chi2, "role/aggregator/chi2_token": agg_chi2,
            "role/generator/len_p50": gen_len * (1 + j()), "role/aggregator/len_p50": agg_len * (1 + j()),
            "role/generator/fence_rate": 0.0, "role/aggregator/fence_rate": 0.0,
            "role/generator/terse_rate": 0.0, "role/aggregator/terse_rate": agg_terse,
            "role/generator/jaccard3": 0.3}


def _feed(mon, rows):
    events = []
    for r in rows:
        events += mon.observe(r)
    return events


def test_clean_streams_fire_nothing():
    rng = random.Random(0)
    for routing in (IP_VOTING, SP_VOTING):
        mon = AlarmMonitor(routing)
        rows = [_row(s, noise=0.1, rng=rng) for s in range(1, 101)]
        vals = [{"step": s, "val/accuracy": 0.5 + 0.003 * s + rng.uniform(-0.04, 0.04)} for s in range(0, 101, 10)]
        assert _feed(mon, rows + vals) == []


def test_gradient_amplification_fires_once_on_the_parallel_role():
    mon = AlarmMonitor(IP_VOTING)
    rows = [_row(s, gen_ppl=1.5 * (1 + max(0, s - 20) * 0.1)) for s in range(1, 61)]  # generator ppl climbs
    events = _feed(mon, rows)
    assert [(e["alarm"], e["role"]) for e in events] == [("gradient_amplification", "generator")]
    e = events[0]
    assert e["event"] == "alarm" and e["values"]["ratio"] >= 2.0 and "generator" in e["message"]
    assert 20 < e["step"] < 60


def test_gradient_amplification_also_reads_chi2_and_needs_the_others_flat():
    mon = AlarmMonitor(IP_VOTING)
    events = _feed(mon, [_row(s, gen_chi2=0.01 + max(0, s - 10) * 0.2) for s in range(1, 41)])
    assert [e["alarm"] for e in events] == ["gradient_amplification"]
    # every role climbing together is not amplification of one role
    mon = AlarmMonitor(IP_VOTING)
    both = [_row(s, gen_ppl=1.5 * (1 + s * 0.1), agg_ppl=1.5 * (1 + s * 0.1)) for s in range(1, 41)]
    assert _feed(mon, both) == []
    # nor does it apply to a role without parallel slots, or under a shared adapter
    mon = AlarmMonitor(IP_VOTING)
    agg_climbs = [_row(s, agg_ppl=1.5 * (1 + s * 0.1)) for s in range(1, 41)]
    assert _feed(mon, agg_climbs) == []
    mon = AlarmMonitor(SP_VOTING)
    assert [e for e in _feed(mon, [_row(s, gen_ppl=1.5 * (1 + s * 0.1)) for s in range(1, 41)])
            if e["alarm"] == "gradient_amplification"] == []


def test_sp_role_capture_fires_when_the_aggregator_turns_verbose():
    mon = AlarmMonitor(SP_VOTING)
    # the aggregator's terse stamp (4 tokens) grows toward the generators' 40-token idiom
    rows = [_row(s, agg_len=4.0 if s < 30 else min(40.0, 4.0 + (s - 30) * 2.0),
                 agg_terse=0.9 if s < 30 else max(0.0, 0.9 - (s - 30) * 0.05)) for s in range(1, 71)]
    events = _feed(mon, rows)
    assert [(e["alarm"], e["role"]) for e in events] == [("sp_role_capture", "aggregator")]
    assert "toward role 'generator'" in events[0]["message"]
    # the same drift under Isolated-Policy is not capture (no shared adapter)
    assert [e for e in _feed(AlarmMonitor(IP_VOTING), rows) if e["alarm"] == "sp_role_capture"] == []


def test_validation_cliff_fires_once_per_peak():
    mon = AlarmMonitor(IP_VOTING)
    accs = [0.5, 0.6, 0.7, 0.65, 0.58, 0.55, 0.72, 0.60]
    events = _feed(mon, [{"step": 10 * i, "val/accuracy": a} for i, a in enumerate(accs)])
    assert [(e["alarm"], e["step"]) for e in events] == [("validation_cliff", 40), ("validation_cliff", 70)]
    assert events[0]["values"]["peak"] == 0.7


def test_nan_values_are_ignored_and_state_restores_from_rows():
    mon = AlarmMonitor(IP_VOTING)
    rows = [_row(s, gen_ppl=float("nan") if s % 3 == 0 else 1.5 * (1 + max(0, s - 20) * 0.1)) for s in range(1, 61)]
    events = _feed(mon, rows)
    assert [e["alarm"] for e in events] == ["gradient_amplification"]
    # a resumed run rebuilds the monitor from metrics.jsonl and does not fire the same alarm again
    mon2 = AlarmMonitor(IP_VOTING)
    mon2.restore(rows[:50] + events)
    assert _feed(mon2, rows[50:]) == []
    assert math.isnan(rows[2]["role/generator/training_ppl"])


def test_thresholds_are_configurable():
    mon = AlarmMonitor(IP_VOTING, AlarmThresholds(amp_ratio=1.2, flat_ratio=1.1))
    events = _feed(mon, [_row(s, gen_ppl=1.5 * (1 + max(0, s - 10) * 0.03)) for s in range(1, 31)])
    assert [e["alarm"] for e in events] == ["gradient_amplification"]
