"""`rolecall grid table`: a grid's record as markdown, checked by hand on a planted record."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rolecall.grid import record_table


def _run(kind, seed, em, abstain, signal=None, status="done"):
    labels = {"seed": f"seed{seed}", **({"signal": signal} if signal else {})}
    vals = [{"step": s, "accuracy": e, "search_answer/em": e, "search_answer/abstain_rate": a}
            for s, e, a in zip((0, 10, 20), em, abstain)]
    return {"cell": f"{signal or kind}-seed{seed}", "kind": kind, "status": status, "labels": labels,
            "validations": vals, "curve": [{"problems": 8.0 * i, "accuracy": e} for i, e in enumerate(em)]}


def _doc():
    return {"what": "rolecall grid", "provenance": {"date": "2026-11-29T10:00:00", "command": "rolecall grid g.yaml",
                                                    "code": {"commit": "abc1234def"}},
            "axes": [{"name": "signal", "role": "method", "labels": ["full", "ablation"]},
                     {"name": "seed", "role": "seed", "labels": ["seed0", "seed1", "seed2"]}],
            "runs": [{"cell": "base", "kind": "base", "status": "done", "labels": {}, "validations": [], "curve": []},
                     _run("control", 0, (0.4, 0.6, 0.8), (0.1, 0.0, 0.0)),
                     _run("control", 1, (0.5, 0.6, 0.6), (0.1, 0.0, 0.0)),
                     _run("run", 0, (0.5, 0.7, 0.9), (0.1, 0.6, 0.2), "full"),
                     _run("run", 1, (0.5, 0.7, 0.8), (0.1, 0.0, 0.0), "full"),
                     _run("run", 2, (0.5, 0.7, 0.9), (0.1, 0.0, 0.0), "full"),  # no control of seed 2 finished
                     _run("run", 0, (0.5, 0.4, 0.7), (0.1, 0.0, 0.0), "ablation"),
                     _run("run", 1, (0.5, 0.5, 0.5), (0.9, 0.9, 0.9), "ablation", status="started")],
            "against_control": []}


def test_arms_are_methods_the_control_and_the_base_by_seed_and_unfinished_runs_are_left_out():
    found = record_table.arms(_doc())
    assert {a: sorted(r) for a, r in found.items()} == {
        "base": ["-"], "control": ["seed0", "seed1"], "full": ["seed0", "seed1", "seed2"], "ablation": ["seed0"]}


def test_the_arms_table_by_hand():
    text = record_table.arms_table(_doc(), ("search_answer/em", "accuracy"), curve=True)
    # full: last 0.9, 0.8, 0.9 -> mean 0.8667, sd 0.0577, t_0.975,2 = 4.303: half 0.1434
    full = "0.500 → 0.867 [0.723, 1.010]"
    assert f"| full | 3 | {full} | {full} | 0.867 [0.723, 1.010] | 0.000 [0.000, 0.000] | 0 | – " \
           "| 0.500 | 0.700 | 0.867 |" in text
    # one seed: the mean alone; its fall 0.5 -> 0.4 below its step-0 peak reaches the 0.1 margin: a cliff
    assert "| ablation | 1 | 0.500 → 0.700 | 0.500 → 0.700 | 0.700 | 0.100 | 1 | – | 0.500 | 0.400 | 0.700 |" in text
    # without accuracy asked, what accuracy did is not shown
    assert "peak accuracy" not in record_table.arms_table(_doc(), ("search_answer/em",))


def test_pairs_are_paired_by_seed_with_interval_detectable_effect_and_verdict():
    doc = _doc()
    assert record_table.paired_values(doc, "full", "control", "search_answer/em") == pytest.approx([0.1, 0.2])
    text = record_table.paired_table(doc, [("full", "control"), ("full", "ablation")], ("search_answer/em",))
    rows = text.splitlines()
    # gains over their own step 0: full 0.4, 0.3 against the control's 0.4, 0.1 -> 0.0, 0.2: mean 0.10, se 0.1;
    # t_0.975,1 = 12.706 (interval +-1.27) and detectable (t_0.975,1 + t_0.80,1) x se = (12.706 + 1.376) x 0.1
    assert rows[2].startswith("| full − control | 2 | +0.15 [")
    assert rows[2].endswith("| +0.10 [-1.17, +1.37], detectable ≥ 1.41, cannot tell |")
    assert rows[3].startswith("| full − ablation | 1 | +0.20 (one seed, no interval) |")
    with pytest.raises(ValueError, match="no finished arm named 'nobody'.*control, full, ablation"):
        record_table.paired_table(doc, [("nobody", "control")])


def test_the_verdict_says_which_arm_is_ahead_only_when_the_interval_excludes_zero():
    assert record_table.difference([0.1, 0.12, 0.11]).endswith("first ahead")
    assert record_table.difference([-0.1, -0.12, -0.11]).endswith("second ahead")
    assert record_table.difference([0.1, -0.12, 0.11]).endswith("cannot tell")


def test_the_note_names_command_commit_and_kept_runs():
    doc = _doc()
    doc["runs"][3]["kept_from"] = {"commit": "0ldc0de", "date": "2026-11-01"}
    note = " ".join(record_table.note(doc, "r.json").split())
    assert ("Recorded 2026-11-29 in `r.json` by `rolecall grid g.yaml`, commit abc1234; kept from the record of "
            "2026-11-01 at commit 0ldc0de (transformers ?): full-seed0.") in note


def test_the_command_prints_the_tables_and_refuses_what_is_not_a_record(tmp_path):
    rec = tmp_path / "r.json"
    rec.write_text(json.dumps(_doc()))
    cmd = [sys.executable, "-m", "rolecall", "grid", "table", str(rec)]
    done = subprocess.run([*cmd, "--pair", "full:control"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "| full − control | 2 |" in done.stdout and "| arm | seeds |" in done.stdout
    bad = subprocess.run([*cmd, "--pair", "full"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "write two arms as A:B" in bad.stdout + bad.stderr
    (tmp_path / "x.json").write_text("[1, 2]")
    wrong = subprocess.run([*cmd[:-1], str(tmp_path / "x.json")], capture_output=True, text=True, timeout=120)
    assert wrong.returncode == 2 and "not a grid's record" in wrong.stdout + wrong.stderr


def _debate_run(kind, seed, accs, tokens, training=None, status="done"):
    curve = [{"problems": 16.0 * i, "generated_tokens": t, "wall_seconds": 10.0 * i, "accuracy": a}
             for i, (a, t) in enumerate(zip(accs, tokens))]
    labels = {"seed": f"seed{seed}", **({"training": training} if training else {})}
    return {"cell": f"{training or kind}-seed{seed}", "kind": kind, "status": status, "labels": labels,
            "curve": curve, "validations": [{"step": 10 * i, "accuracy": a} for i, a in enumerate(accs)]}


def test_a_control_from_another_record_is_paired_at_equal_costs_and_the_note_names_each_runs_code():
    """A debate grid read against another grid's single-agent control (same task and seeds): at
    equal generated tokens (the cheaper run's total, the control's) the debate is read at an
    earlier validation; which code wrote each run and which runs were kept are named."""
    deb = (0.0, 3000.0, 6000.0)  # a debate episode costs far more tokens than a single answer
    doc = {"provenance": {"date": "2026-12-04", "command": "rolecall grid d.yaml"},
           "axes": [{"name": "training", "role": "method", "labels": ["co_trained", "frozen_peers"]},
                    {"name": "seed", "role": "seed", "labels": ["seed0", "seed1"]}],
           "runs": [{**_debate_run("run", 0, (0.2, 0.5, 0.7), deb, "co_trained"),
                     "kept_from": {"commit": "fedcba9", "date": "2026-12-01", "versions": {"transformers": "5.24.0"}}},
                    {**_debate_run("run", 1, (0.2, 0.6, 0.6), deb, "co_trained"),
                     "sittings": [{"step": 0, "commit": "1111111" + "a" * 33, "dirty": False}]},
                    {**_debate_run("run", 0, (0.2, 0.4, 0.5), deb, "frozen_peers"),  # resumed on other code
                     "sittings": [{"step": 0, "commit": "2222222" + "b" * 33, "dirty": False},
                                  {"step": 31, "commit": "3333333" + "c" * 33, "dirty": True}]},
                    _debate_run("run", 1, (0.2, 0.4, 0.3), deb, "frozen_peers"),
                    _debate_run("run", 2, (0.2, 0.3, 0.3), deb, "frozen_peers", status="started")]}
    matrix = {"runs": [_debate_run("control", s, (0.25, 0.5, 0.6), (0.0, 1000.0, 2000.0)) for s in (0, 1)],
              "axes": []}
    with pytest.raises(ValueError, match="no control runs"):
        record_table.with_control_from(doc, {"runs": [], "axes": []}, "x.json")
    both = record_table.with_control_from(doc, matrix, "m.json")
    # last validation and equal problems and time: 0.70 - 0.60, 0.60 - 0.60; at equal tokens (2000, the
    # control's whole run) the debate's last validation within them is step 0: 0.20 - 0.60 on both seeds
    assert record_table.paired_values(both, "co_trained", "control", "accuracy") == pytest.approx([0.1, 0.0])
    assert record_table.matched_values(both, "co_trained", "control", "problems") == pytest.approx([0.1, 0.0])
    assert record_table.matched_values(both, "co_trained", "control", "generated_tokens") == pytest.approx([-0.4, -0.4])
    row = record_table.paired_table(both, [("co_trained", "control")]).splitlines()[2].split(" | ")
    # each pair of seeds differs by 0.10 (s / sqrt(2) = 0.05): detectable 14.082 x 0.05 = 0.70
    assert row[2] == "+0.05 [-0.59, +0.69], detectable ≥ 0.70, cannot tell"
    assert row[4] == "-0.40 [-0.40, -0.40], detectable ≥ 0.00, second ahead"
    note = " ".join(record_table.note(both, "d.json").split())
    assert "kept from the record of 2026-12-01 at commit fedcba9 (transformers 5.24.0): co_trained-seed0" in note
    assert ("; code: co_trained-seed1 at 1111111, frozen_peers-seed0 at 2222222, 3333333+ from step 31; "
            "no commit stored for co_trained-seed0, frozen_peers-seed1") in note  # not the started run
    assert "The control's runs are from `m.json`." in note
    assert "frozen_peers-seed2" not in note
    with pytest.raises(ValueError, match="no run of the record logged 'debate/nope'; its validation metrics: accuracy"):
        record_table.markdown(both, "d.json", metrics=("debate/nope",))
    with pytest.raises(ValueError, match="no table named nope"):
        record_table.markdown(both, "d.json", parts=("arms", "nope"))
    assert record_table.markdown(both, "d.json", pairs=[("co_trained", "control")], parts=("pairs",)).startswith(
        "| A − B, paired by seed |")


def test_cliffs_are_falls_below_an_earlier_peak_and_long_controls_are_marked():
    """A fall of 0.2 below an earlier peak is a cliff at the 0.1 margin, a dip of 0.05 is not; the
    base model is evaluated, not trained; columns read against a longer control carry ‡."""
    doc = _doc()
    doc["runs"][3]["curve"] = [{"problems": 0.0, "accuracy": 0.5}, {"problems": 8.0, "accuracy": 0.9},
                               {"problems": 16.0, "accuracy": 0.7}, {"problems": 24.0, "accuracy": 0.9}]
    doc["runs"][0].update(validations=[{"step": 0, "accuracy": 0.3}], curve=[{"problems": 0.0, "accuracy": 0.3}])
    assert record_table.deepest_fall(doc["runs"][3]) == pytest.approx(0.2)
    assert record_table.deepest_fall({**doc["runs"][3], "fall": 0.05}) == 0.05  # the record's own, where it has one
    text = record_table.arms_table(doc)
    assert "| base | 1 | 0.300 → – | – | – | – | – |" in text
    assert text.splitlines()[4].startswith("| full | 3 |") and text.splitlines()[4].endswith(" | 1 | – |")
    ab = [0.1, 0.2]
    doc["against_control"] = [{"setting": [], "method": ["full"], "paired_with_control": 2,
                               **{m: {"values": ab} for m in ("problems", "generated_tokens", "wall_seconds",
                                                               "peak_vs_own_base")},
                               "long_control": {"paired": 2, "matchings": ["generated_tokens", "wall_seconds"]}}]
    control = record_table.control_table(doc).splitlines()
    assert control[2].split(" | ")[2].endswith("cannot tell") and control[2].split(" | ")[3].endswith(" ‡")
    assert control[-1].startswith("‡: against the longer control of the same seed")


def test_a_record_without_validations_reads_its_curve_and_last_rules_and_arms_without_the_metrics_are_left_out():
    """Records written before each validation was kept hold accuracy on the curve and the workflow's
    metrics at the last validation only: a selecting role is read beside its trivial rules there."""
    def run(kind, seed, accs, rules=None, **labels):
        return {"cell": f"{kind}-{seed}", "kind": kind, "status": "done", "labels": {**labels, "seed": f"seed{seed}"},
                "curve": [{"problems": 4.0 * i, "accuracy": a} for i, a in enumerate(accs)],
                "rules_at_last_validation": rules or {}}

    rules = {"voting/selection_acc": 0.40, "voting/rule_first_acc": 0.38}
    doc = {"axes": [{"name": "workflow", "role": "method", "labels": ["voting"]},
                    {"name": "seed", "role": "seed", "labels": ["seed0", "seed1"]}],
           "runs": [run("control", 0, (0.2, 0.7)), run("run", 0, (0.3, 0.6), rules, workflow="voting"),
                    run("run", 1, (0.3, 0.5), rules, workflow="voting")]}
    text = record_table.arms_table(doc, ("voting/selection_acc", "voting/rule_first_acc"))
    assert text.splitlines()[2:] == ["| voting | 2 | – → 0.400 [0.400, 0.400] | – → 0.380 [0.380, 0.380] |"]
    assert "| voting | 2 | 0.300 → 0.550 [-0.085, 1.185] |" in record_table.arms_table(doc)
