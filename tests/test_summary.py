"""summary.json: the paper's Table 2 ratios, Fig. 5 amplitudes, the accuracy cliff and alarm counts."""
from __future__ import annotations

import json

import pytest

from rolecall.diagnostics.summary import FLOORS, NOT_MEASURABLE, summarize, write_summary
from rolecall.report import build_page, load_run

NAN = float("nan")


def train_row(step: int, gen: tuple, agg: tuple, pol: tuple) -> dict:
    """(chi2_token, training_ppl, grad_norm, entropy) for the generator, the aggregator and the shared policy."""
    row: dict = {"step": step, "reward/mean": 0.5, "role/generator/len_p50": 100.0}
    for prefix, vals in (("role/generator", gen), ("role/aggregator", agg), ("policy/shared", pol)):
        row.update({f"{prefix}/{m}": v for m, v in zip(("chi2_token", "training_ppl", "grad_norm", "entropy"), vals)})
    return row


# 4 training steps, two roles on one shared policy, validation at steps 0, 2 and 4, two alarms.
#                 generator: χ²    ppl   grad  entropy   aggregator: χ²  ppl   grad  entropy  policy: χ²  ppl   grad  entropy
ROWS = [
    {"step": 0, "val/accuracy": 0.40},
    train_row(1, (None, 1.20, 0.50, 0.90), (0.010, 1.00, 0.40, 0.50), (0.020, 1.20, 0.80, 0.70)),
    train_row(2, (0.040, 1.50, 1.00, 0.60), (0.012, 1.10, 0.30, 0.55), (0.030, 1.30, 1.20, 0.60)),
    {"step": 2, "val/accuracy": 0.55},
    train_row(3, (0.160, 2.40, 0.90, 0.45), (0.008, 1.05, 0.60, 0.52), (0.090, 1.80, 1.00, 0.50)),
    {"step": 3, "event": "alarm", "alarm": "gradient_amplification", "role": "generator", "message": "m", "values": {}},
    train_row(4, (0.100, 1.80, 0.70, 0.50), (NAN, 1.08, 0.35, 0.40), (0.060, 1.40, 0.60, 0.45)),
    {"step": 4, "val/accuracy": 0.35},
    {"step": 4, "event": "alarm", "alarm": "validation_cliff", "role": None, "message": "m", "values": {}},
]


def stats(first, peak, peak_step, ratio) -> dict:
    return {"first": first, "peak": peak, "peak_step": peak_step, "ratio": pytest.approx(ratio)}


def core(d: dict) -> dict:
    """A Table 2 statistic without its floor and measurable base (checked where they matter)."""
    return {k: d[k] for k in ("first", "peak", "peak_step", "ratio")}


def test_hand_computed_statistics():
    s = summarize(ROWS)
    gen, agg, pol = s["table2"]["roles"]["generator"], s["table2"]["roles"]["aggregator"], s["table2"]["policies"]["shared"]
    assert list(s["table2"]["roles"]) == ["generator", "aggregator"] and list(s["table2"]["policies"]) == ["shared"]
    # generator: χ² is null at step 1, so first = 0.040 (step 2); peak 0.160 at step 3 -> 0.160 / 0.040 = 4
    assert core(gen["chi2_token"]) == stats(0.040, 0.160, 3, 4.0)
    assert core(gen["training_ppl"]) == stats(1.20, 2.40, 3, 2.0)  # 2.40 / 1.20 = 2
    assert core(gen["grad_norm"]) == stats(0.50, 1.00, 2, 2.0)  # 1.00 / 0.50 = 2
    assert gen["chi2_peak_step"] == 3
    # aggregator: χ² is NaN at step 4 (skipped); peak 0.012 at step 2 -> 0.012 / 0.010 = 1.2
    assert core(agg["chi2_token"]) == stats(0.010, 0.012, 2, 1.2)
    assert core(agg["training_ppl"]) == stats(1.00, 1.10, 2, 1.1)  # 1.10 / 1.00 = 1.1
    assert core(agg["grad_norm"]) == stats(0.40, 0.60, 3, 1.5)  # 0.60 / 0.40 = 1.5
    assert agg["chi2_peak_step"] == 2
    # shared policy: 0.090 / 0.020 = 4.5; 1.80 / 1.20 = 1.5; 1.20 / 0.80 = 1.5
    assert core(pol["chi2_token"]) == stats(0.020, 0.090, 3, 4.5)
    assert core(pol["training_ppl"]) == stats(1.20, 1.80, 3, 1.5)
    assert core(pol["grad_norm"]) == stats(0.80, 1.20, 2, 1.5)
    assert pol["chi2_peak_step"] == 3
    assert not any("ratio_note" in e[m] for e in (gen, agg, pol) for m in ("chi2_token", "training_ppl", "grad_norm"))

    amp = s["amplitude"]
    # entropy collapse = first - min: generator 0.90 - 0.45 = 0.45; aggregator 0.50 - 0.40 = 0.10; policy 0.70 - 0.45 = 0.25
    assert amp["roles"]["generator"] == {"max_chi2": 0.160, "max_grad_norm": 1.00, "entropy_collapse": pytest.approx(0.45)}
    assert amp["roles"]["aggregator"] == {"max_chi2": 0.012, "max_grad_norm": 0.60, "entropy_collapse": pytest.approx(0.10)}
    assert amp["policies"]["shared"] == {"max_chi2": 0.090, "max_grad_norm": 1.20, "entropy_collapse": pytest.approx(0.25)}

    # validation 0.40 (step 0), 0.55 (step 2), 0.35 (step 4): cliff = 0.55 - 0.35 = 0.20
    assert s["accuracy"] == {"base": 0.40, "peak": 0.55, "peak_step": 2, "final": 0.35, "final_step": 4,
                             "cliff": pytest.approx(0.20), "fall": pytest.approx(0.20), "fall_from_step": 2,
                             "fall_step": 4}
    assert s["alarms"] == {"gradient_amplification": 1, "validation_cliff": 1}
    assert s["steps"] == 4


def test_a_ratio_starts_at_the_first_value_over_its_floor_and_is_absent_without_one():
    """On-policy χ² begins as noise around 0 (1e-9 in float32): a peak over it once printed as a
    123,260x amplification. The ratio's base is the first value at or above the floor."""
    rows = [{"step": s, "role/solver/chi2_token": v, "role/solver/grad_norm": 0.3, "role/solver/entropy": 0.5}
            for s, v in ((1, 1e-9), (2, 0.02), (3, 0.08), (4, 0.05))]
    chi2 = summarize(rows)["table2"]["roles"]["solver"]["chi2_token"]
    assert chi2 == {"first": 1e-9, "peak": 0.08, "peak_step": 3, "floor": FLOORS["chi2_token"], "base": 0.02,
                    "base_step": 2, "ratio": pytest.approx(4.0)}
    # never measurable: every value under the floor gives no ratio, and says why
    noise = [{**r, "role/solver/chi2_token": v} for r, v in zip(rows, (1e-9, 4e-3, 7e-3, 2e-3))]
    chi2 = summarize(noise)["table2"]["roles"]["solver"]["chi2_token"]
    assert chi2["ratio"] is None and chi2["base"] is None and chi2["ratio_note"] == NOT_MEASURABLE
    assert chi2["peak"] == 7e-3  # the values themselves are still reported
    # a flat grad norm: 0.3 / 0.3 = 1, peak at its first step; no entropy drop
    s = summarize(rows)
    assert core(s["table2"]["roles"]["solver"]["grad_norm"]) == stats(0.3, 0.3, 1, 1.0)
    assert s["amplitude"]["roles"]["solver"]["entropy_collapse"] == 0.0


def test_the_deepest_fall_after_a_peak_is_found_when_the_run_recovers():
    """0.80 -> 0.55 -> 0.75: peak minus final says 0.05, the run fell 0.25 (from step 10 to 20)."""
    rows = [{"step": s, "val/accuracy": v} for s, v in ((0, 0.4), (10, 0.8), (20, 0.55), (25, 0.6), (30, 0.75))]
    acc = summarize(rows)["accuracy"]
    assert acc["cliff"] == pytest.approx(0.05)
    assert acc["fall"] == pytest.approx(0.25) and acc["fall_from_step"] == 10 and acc["fall_step"] == 20
    rising = summarize([{"step": s, "val/accuracy": v} for s, v in ((0, 0.4), (5, 0.5))])["accuracy"]
    assert rising["fall"] == 0.0 and rising["fall_step"] is None


def test_nothing_logged():
    s = summarize([{"step": 0, "val/accuracy": None}])
    assert s == {"table2": {"roles": {}, "policies": {}}, "amplitude": {"roles": {}, "policies": {}},
                 "accuracy": {"base": None, "peak": None, "peak_step": None, "final": None, "final_step": None,
                              "cliff": None, "fall": None, "fall_from_step": None, "fall_step": None},
                 "alarms": {}, "steps": 0, "stopped": None}
    unlogged = summarize([{"step": 1, "role/a/entropy": None}])
    assert unlogged["table2"]["roles"]["a"]["chi2_token"] == {"first": None, "peak": None, "peak_step": None,
                                                              "floor": FLOORS["chi2_token"], "base": None,
                                                              "base_step": None, "ratio": None}
    assert unlogged["amplitude"]["roles"]["a"] == {"max_chi2": None, "max_grad_norm": None, "entropy_collapse": None}


def test_stopped_names_why_until_a_resume_trains_past_it():
    stop = {"step": 2, "event": "stop", "reason": "stop_below_peak", "message": "below its peak"}
    rows = [{"step": 1, "loss": 1.0}, {"step": 2, "loss": 1.0}, {"step": 2, "val/accuracy": 0.1}, stop]
    assert summarize(rows)["stopped"] == {"reason": "stop_below_peak", "step": 2, "message": "below its peak"}
    assert summarize([*rows, {"step": 3, "loss": 1.0}])["stopped"] is None  # resumed and trained on


def write_rows(d, rows, tail=""):
    d.mkdir()
    # NaN is written as null, as the trainer does
    text = "".join(json.dumps({k: (None if v != v else v) for k, v in r.items()}) + "\n" for r in rows)
    (d / "metrics.jsonl").write_text(text + tail)
    return d


def test_write_summary_is_json_next_to_metrics_and_skips_a_torn_line(tmp_path):
    d = write_rows(tmp_path / "run", ROWS, tail='{"step": 5, "role/generator/chi2_token": 9')
    out = write_summary(d)
    on_disk = json.loads((d / "summary.json").read_text())
    assert on_disk == out == json.loads(json.dumps({**summarize(ROWS), "sittings": []}))  # the torn step-5 row is not counted
    assert out["steps"] == 4 and out["table2"]["roles"]["generator"]["chi2_token"]["peak"] == 0.160
    assert sorted(p.name for p in d.iterdir()) == ["metrics.jsonl", "summary.json"]  # no temp file left
    write_summary(d)  # rewriting replaces it
    assert json.loads((d / "summary.json").read_text()) == on_disk


def test_report_shows_paper_statistics(tmp_path):
    page = build_page([load_run(write_rows(tmp_path / "run", ROWS))])
    assert "<h2>Paper statistics</h2>" in page
    assert '<td class="num" title="first 0.04 → peak 0.16 at step 3">4.00×</td>' in page  # generator χ²: 0.160 / 0.040
    assert '<td class="num">0.45</td>' in page  # generator entropy collapse: 0.90 - 0.45
    assert "peak 0.550 @ step 2" in page and "final 0.350 @ step 4" in page
    assert "deepest fall 0.200 (step 2 → 4)" in page
    assert page.index("<td>role generator</td>") < page.index("<td>role aggregator</td>") < page.index("<td>policy shared</td>")

    on_policy = [{"step": s, "role/solver/chi2_token": v} for s, v in ((1, 0.0), (2, 0.004))]
    page = build_page([load_run(write_rows(tmp_path / "sa", on_policy))])
    assert "not measurable</td>" in page and NOT_MEASURABLE in page and "no validation logged" in page
