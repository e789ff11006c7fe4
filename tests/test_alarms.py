"""Alarms fire on planted drift streams, once each, and stay silent on clean streams."""
from __future__ import annotations

import math
import random

import pytest

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


def _val(step, acc, n, *, se=True):
    """A validation row over n one-sample problems: its binomial se, or only val/n (an older row)."""
    row = {"step": step, "val/accuracy": acc, "val/n": n}
    if se:
        row["val/accuracy_se"] = math.sqrt(acc * (1 - acc) / n)
    return row


def test_validation_cliff_ignores_a_fall_inside_the_sampling_noise():
    # The measured case: 8 problems, 0.500 -> 0.375 is one answer. se 0.1768 and 0.1712, the
    # difference's se sqrt(0.03125 + 0.029297) = 0.2461, threshold 1.96 x 0.2461 = 0.482 > 0.125.
    rows = [_val(0, 0.5, 8), _val(4, 0.375, 8)]
    assert _feed(AlarmMonitor(IP_VOTING), rows) == []
    # a row from before val/accuracy_se was logged gets the same binomial se from val/n
    assert _feed(AlarmMonitor(IP_VOTING), [_val(0, 0.5, 8, se=False), _val(4, 0.375, 8, se=False)]) == []
    # cliff_z 0 is the margin alone, as before: 0.125 >= 0.1 fires, with the old message
    events = _feed(AlarmMonitor(IP_VOTING, AlarmThresholds(cliff_z=0)), rows)
    assert [(e["alarm"], e["step"]) for e in events] == [("validation_cliff", 4)]
    assert events[0]["message"] == "validation accuracy 0.375 is 0.125 below its peak 0.500"


def test_validation_cliff_fires_on_a_fall_beyond_the_noise():
    # 100 problems, 0.60 -> 0.30: se sqrt(0.24/100) = 0.0490 and sqrt(0.21/100) = 0.0458, the
    # difference's se sqrt(0.0045) = 0.0671, threshold 1.96 x 0.0671 = 0.1315 < the fall 0.30.
    events = _feed(AlarmMonitor(IP_VOTING), [_val(0, 0.6, 100), _val(10, 0.3, 100)])
    assert [(e["alarm"], e["step"]) for e in events] == [("validation_cliff", 10)]
    assert events[0]["values"] == {"accuracy": 0.3, "peak": 0.6, "fall": 0.3, "noise": 0.1315,
                                   "se_peak": 0.049, "se_now": 0.0458}
    assert "0.300 below its peak 0.600" in events[0]["message"] and "noise threshold 0.131" in events[0]["message"]
    assert "se 0.049 at the peak, 0.046 now" in events[0]["message"]


def test_validation_cliff_stays_armed_through_a_noisy_fall_and_restores():
    # 0.49 is past the margin (0.11) but not the noise: se 0.0500, threshold
    # 1.96 x sqrt(0.0024 + 0.002499) = 0.1372 > 0.11. The deeper 0.30 then fires.
    rows = [_val(0, 0.6, 100), _val(10, 0.49, 100), _val(20, 0.3, 100)]
    events = _feed(AlarmMonitor(IP_VOTING), rows)
    assert [(e["alarm"], e["step"]) for e in events] == [("validation_cliff", 20)]
    # resumed after the noisy fall: the peak's se comes back with it, and the alarm fires the same
    mon = AlarmMonitor(IP_VOTING)
    mon.restore(rows[:2])
    assert [e["step"] for e in _feed(mon, rows[2:])] == [20]
    # resumed after the alarm: not raised again until a new peak
    mon = AlarmMonitor(IP_VOTING)
    mon.restore(rows + events)
    assert _feed(mon, [_val(30, 0.25, 100)]) == []
    assert [e["step"] for e in _feed(mon, [_val(40, 0.7, 100), _val(50, 0.3, 100)])] == [50]


def test_validation_cliff_without_any_error_logged_is_the_margin_alone():
    events = _feed(AlarmMonitor(IP_VOTING), [{"step": 0, "val/accuracy": 0.5}, {"step": 4, "val/accuracy": 0.375}])
    assert [e["step"] for e in events] == [4]
    assert events[0]["message"].endswith("no standard error logged, so the margin alone")
    assert events[0]["values"]["noise"] is None and events[0]["values"]["se_peak"] is None


def test_accuracy_se_is_over_problems():
    from rolecall.train.step import accuracy_se
    from rolecall.types import Episode, Problem

    def eps(rewards_by_uid):
        return [Episode(Problem(uid, "q", "a"), i, reward=r) for uid, rs in rewards_by_uid.items() for i, r in enumerate(rs)]

    # one sample each, one unscorable: n 4, p 3/4, se sqrt(0.75 * 0.25 / 4) = 0.2165 (binomial)
    n, se = accuracy_se(eps({"a": [1.0], "b": [0.0], "c": [1.0], "d": [1.0], "e": [None]}))
    assert n == 4 and se == pytest.approx(math.sqrt(0.75 * 0.25 / 4)) and round(se, 4) == 0.2165
    # two samples each (partial credit 0.5 is not correct): a_p = 1, 0.5, 0, 0 over P 4, mean 0.375,
    # population variance (0.625² + 0.125² + 2 x 0.375²) / 4 = 0.171875, se sqrt(0.171875 / 4) = 0.2073
    n, se = accuracy_se(eps({"a": [1.0, 1.0], "b": [1.0, 0.5], "c": [0.0, 0.0], "d": [None, 0.0]}))
    assert n == 7 and se == pytest.approx(math.sqrt(0.171875 / 4)) and round(se, 4) == 0.2073
    # every answer alike: no spread; nothing scorable: no error
    assert accuracy_se(eps({"a": [1.0], "b": [1.0]})) == (2, 0.0)
    n, se = accuracy_se(eps({"a": [None]}))
    assert n == 0 and math.isnan(se)
