"""`rolecall compare` end to end on the embedded default (voting) at smoke size, its resume, the
transfer arm's adapters, the long control's length, and the questions on planted evaluations."""
from __future__ import annotations

import json

import pytest
from safetensors.torch import load_file
from typer.testing import CliRunner

from rolecall.cli import app
from rolecall.compare import plan as P
from rolecall.compare.costs import cumulative, step_within, totals
from rolecall.compare.questions import arm_table, ask, rule_table

SMOKE = ["train.steps=2", "task.n_val=6", "rollout.problems_per_step=2", "rollout.group_size=2",
         "train.val_every=1", "train.checkpoint_every=1"]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("compare") / "cmp"
    res = CliRunner().invoke(app, ["compare", "examples/voting", *SMOKE, "--seeds", "2", "--samples", "2",
                                   "--out", str(out)])
    assert res.exit_code == 0, res.output
    return out, json.loads((out / "record.json").read_text())


def test_compare_runs_every_arm_and_answers_every_question(smoke):
    out, rec = smoke
    arms = set(rec["arms"])
    for seed in (0, 1):
        assert {f"control-seed{seed}", f"voting-isolated-seed{seed}", f"voting-transfer-seed{seed}"} <= arms
        matched = rec["matched"][f"voting-isolated-seed{seed}"]
        assert matched["generated_tokens"] in arms and matched["wall_seconds"] in arms
        assert matched["generated_tokens_reach"] >= 1 and matched["wall_seconds_reach"] >= 1
    assert "voting-untrained" in arms
    assert rec["validation_problems"] == 6 and rec["samples_per_problem"] == 2
    ids = {q["id"] for q in rec["questions"]}
    assert {"a/problems/voting-isolated", "a/generated_tokens/voting-isolated", "a/wall_seconds/voting-isolated",
            "b/transfer/voting", "b/trained_vs_transfer/voting-isolated", "c/voting-isolated",
            "d/voting-isolated/aggregator/first", "d/voting-isolated/aggregator/majority",
            "d/voting-untrained/aggregator/first"} <= ids
    for q in rec["questions"]:
        assert q["verdict"] in ("A > B", "B > A", "cannot tell"), q
        lo, hi = q["ci95_t"]
        assert lo <= q["estimate"] <= hi and q["mde80"] > 0
        assert q["seeds"] == (1 if "untrained/" in q["id"] else 2) and q["problems"] == 6
        v = q["variance"]
        assert v["total"] == pytest.approx(v["seed"] + v["problem"] + v["interaction"] + v["sampling"], abs=2e-4)
    assert (out / "report.html").read_text().count("<tr>") > len(rec["questions"])
    assert rec["provenance"]["model"]["weights"] and rec["provenance"]["sittings"]["control-seed0"]
    assert rec["stopping_rule"] == "fixed: 2 seeds" and not rec["failed"]


def test_each_evaluation_answers_every_problem_samples_times(smoke):
    out, _ = smoke
    doc = json.loads((out / "evals" / "voting-isolated-seed0.json").read_text())
    assert len(doc["problems"]) == 6 and doc["episodes"] == 12
    for row in doc["problems"].values():
        assert len(row["correct"]) == 2 and len(row["oracle"]) == 2
        assert set(row["rules"]["aggregator"]) == {"first", "majority"}
    assert doc["checkpoint_step"] == 2 and doc["cost"]["problems"] == 4.0  # 2 steps x 2 problems
    assert not list((out / "evals").glob("*.partial.jsonl"))  # every chunk was folded in


def test_resume_runs_nothing_again_and_refuses_other_options(smoke):
    out, rec = smoke
    before = {p.name: p.stat().st_mtime_ns for p in (out / "evals").iterdir()}
    res = CliRunner().invoke(app, ["compare", "examples/voting", *SMOKE, "--seeds", "2", "--samples", "2",
                                   "--out", str(out), "--resume"])
    assert res.exit_code == 0, res.output
    assert {p.name: p.stat().st_mtime_ns for p in (out / "evals").iterdir()} == before
    res = CliRunner().invoke(app, ["compare", "examples/voting", *SMOKE, "--seeds", "2", "--samples", "3",
                                   "--out", str(out), "--resume"])
    assert res.exit_code != 0 and "samples=2" in res.output
    res = CliRunner().invoke(app, ["compare", "examples/voting", *SMOKE, "--out", str(out)])
    assert res.exit_code != 0 and "--resume" in res.output
    res = CliRunner().invoke(app, ["compare", "report", str(out)])
    assert res.exit_code == 0 and json.loads((out / "record.json").read_text())["questions"] == rec["questions"]


def test_transfer_puts_the_controls_adapter_on_the_answering_roles_only(smoke):
    from rolecall.policies.adapter_files import adapter_files, model_of
    from rolecall.rundir.checkpoint import latest_checkpoint
    from rolecall.train.stack import build_stack

    out, _ = smoke
    opts = P.Options(configs=["examples/voting"], overrides=SMOKE, seeds=2, samples=2)
    (wf,) = P.workflows(opts)
    assert wf.answering == ("generator",) and set(wf.roles) == {"generator", "aggregator"}
    control = out / "runs" / "control-seed1"
    cfg = P.transfer_config(opts, wf, control)
    stack = build_stack(cfg)
    try:
        assert stack.routing.routes == {"generator": P.TRANSFER_POLICY, "aggregator": "base"}
        assert cfg.policies[P.TRANSFER_POLICY].trainable is False
        model = stack.models_by_adapter()[P.TRANSFER_POLICY]
        loaded = adapter_files(model_of(model, P.TRANSFER_POLICY), P.TRANSFER_POLICY)["adapter_model.safetensors"]
    finally:
        stack.close()
    saved = load_file(str(latest_checkpoint(control) / "generator" / "adapter_model.safetensors"))
    tmp = out / "loaded.safetensors"
    tmp.write_bytes(loaded)
    got = load_file(str(tmp))
    assert set(got) == set(saved) and all((got[k] == saved[k]).all() for k in saved)
    assert any(v.abs().sum() > 0 for k, v in saved.items() if "lora_B" in k)  # trained: not the zero init


def test_single_workflow_and_mismatched_budgets_are_refused(tmp_path):
    with pytest.raises(P.CompareError, match="single-agent workflow is the control"):
        P.workflows(P.Options(configs=["examples/single"]))
    longer = tmp_path / "eval_opt.yaml"
    longer.write_text("workflow: {name: eval_opt}\ntrain: {steps: 7}\n")
    with pytest.raises(P.CompareError, match="differ in task, model or budget .*steps: 100 against 7"):
        P.workflows(P.Options(configs=["examples/voting", str(longer)]))
    assert [w.label for w in P.workflows(P.Options(configs=["examples/voting", "examples/eval_opt"]))] == \
        ["voting", "eval_opt"]


def test_long_control_trains_past_the_largest_arm_at_the_controls_rate():
    ctl = [{"step": s, "tokens/generated": 10.0, "time/step_s": 1.0, "rollout/problems": 2.0} for s in (1, 2, 3, 4)]
    arm = [{"step": s, "tokens/generated": 50.0, "time/step_s": 2.0, "rollout/problems": 2.0} for s in (1, 2, 3, 4)]
    # the arm spent 200 tokens and 8 s; the control 10 tokens and 1 s a step: 20 steps for tokens,
    # 8 for time; x1.5 = 30, already a multiple of 5
    got = P.long_control_steps(ctl, [arm], steps=4, every=5, factor=1.5)
    assert got["steps"] == 30 and got["needed"] == {"generated_tokens": 200.0, "wall_seconds": 8.0}


def test_costs_count_a_resumed_step_once_and_read_the_last_checkpoint_within_a_budget():
    rows = [{"step": 1, "tokens/generated": 10.0, "time/step_s": 1.0},
            {"step": 2, "tokens/generated": 99.0, "time/step_s": 9.0},  # killed, then redone:
            {"step": 2, "tokens/generated": 20.0, "time/step_s": 2.0},
            {"step": 2, "val/accuracy": 0.5},
            {"step": 3, "tokens/generated": 30.0, "time/step_s": 3.0}]
    assert cumulative(rows)[2]["generated_tokens"] == 30.0 and totals(rows)["wall_seconds"] == 6.0
    assert step_within(rows, [1, 2, 3], "generated_tokens", 59.0) == 2
    assert step_within(rows, [1, 3], "generated_tokens", 59.0) == 1
    assert step_within(rows, [1, 2, 3], "generated_tokens", 5.0) is None


def _doc(rows: dict[str, list], rules: dict | None = None) -> dict:
    return {"problems": {uid: {"correct": xs, **({"rules": {"aggregator": {"first": rules[uid]}}} if rules else {})}
                         for uid, xs in rows.items()}}


def test_questions_on_planted_evaluations_are_the_hand_computed_differences():
    # seed 0: A is right on p1 twice and p2 never, B right once on each: differences +0.5, -0.5.
    # seed 1: A right on both always, B right on p1 never and p2 always: +1, 0. Mean over cells 0.25.
    evals = {"control-seed0": _doc({"p1": [1, 0], "p2": [1, 0]}), "control-seed1": _doc({"p1": [0, 0], "p2": [1, 1]}),
             "voting-isolated-seed0": _doc({"p1": [1, 1], "p2": [0, 0]}, {"p1": [1, 0], "p2": [0, 0]}),
             "voting-isolated-seed1": _doc({"p1": [1, 1], "p2": [1, 1]}, {"p1": [1, 1], "p2": [0, 1]}),
             "voting-untrained": _doc({"p1": [0, 0], "p2": [0, 1]})}
    plan = {"seeds": [0, 1], "matched": {}, "workflows": [{"label": "voting", "routings": ["isolated"]}]}
    qs = {q["id"]: q for q in ask(evals, plan)}
    a = qs["a/problems/voting-isolated"]
    assert a["estimate"] == pytest.approx(0.25) and a["A_accuracy"] == 0.75 and a["B_accuracy"] == 0.5
    assert qs["a/generated_tokens/voting-isolated"]["verdict"] == "not run"
    # against the untrained (one evaluation, paired with both seeds): means (.5 + 0) ... cells
    # seed0: 1-0, 0-.5; seed1: 1-0, 1-.5 -> mean (1 - .5 + 1 + .5) / 4 = 0.5
    assert qs["c/voting-isolated"]["estimate"] == pytest.approx(0.5)
    # the aggregator against 'first', per episode: seed0 p1 (1-1, 1-0) p2 (0, 0); seed1 p1 (0, 0) p2 (1, 0)
    # cell means .5, 0, 0, .5 -> 0.25
    d = qs["d/voting-isolated/aggregator/first"]
    assert d["estimate"] == pytest.approx(0.25) and d["A_accuracy"] == 0.75 and d["B_accuracy"] == 0.5
    table, _ = rule_table({0: evals["voting-isolated-seed0"]}, "aggregator", "first")
    assert table.diff.tolist() == [[0.5, 0.0]]
    table, _ = arm_table({0: {"p1": [None, None]}}, {0: {"p1": [1]}})  # nothing scorable on one side
    assert table is None


def test_a_compare_file_holds_the_options_and_a_flag_overrides_it(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("configs: [examples/voting]\noverrides: {train.steps: 2, task.n_val: 6}\nseeds: 3\nsamples: 4\n")
    res = CliRunner().invoke(app, ["compare", str(f), "--dry-run", "--seeds", "2"])
    assert res.exit_code == 0, res.output
    assert "2 seeds x 7 units per seed, 4 answers per validation problem" in res.output
    assert "'val_problems': 6" in res.output
    f.write_text("configs: [examples/voting]\nseedz: 3\n")
    res = CliRunner().invoke(app, ["compare", str(f), "--dry-run"])
    assert res.exit_code != 0 and "unknown key 'seedz'" in res.output


def test_target_mde_adds_a_seed_while_the_design_cannot_see_the_target_and_keeps_each_look(smoke):
    from rolecall.compare.runner import Comparison

    out, _ = smoke
    cmp = Comparison.open(out, None, True, lambda text: None)
    cmp.opts.target_mde, cmp.opts.max_seeds = 0.01, 3
    assert cmp.more_seeds() is True  # two seeds on six problems cannot see one point
    cmp.state.seeds.append(2)
    assert cmp.more_seeds() is False  # the cap
    cmp.opts.target_mde = 0.99
    cmp.state.seeds.pop()
    assert cmp.more_seeds() is False  # already below the target
    looks = cmp.state.stopping
    assert [x["decision"] for x in looks] == ["add a seed", "stop", "stop"] and looks[0]["largest_mde80"] > 0.01
    from rolecall.compare.record import stopping_rule

    assert "largest mde80" in stopping_rule(cmp.opts) and "never at an estimate" in stopping_rule(cmp.opts)


def test_a_stopped_evaluation_keeps_its_finished_chunks_unless_they_were_cut_otherwise(tmp_path):
    from rolecall.compare.evaluate import finished_chunks

    p = tmp_path / "x.partial.jsonl"
    p.write_text(json.dumps({"chunk": 0, "size": 25, "episodes": 1, "problems": {}, "metrics": {}}) + "\n"
                 + json.dumps({"chunk": 1, "size": 25, "episodes": 1, "problems": {}, "metrics": {}}) + "\n{\"chunk\": 2, ")
    assert sorted(finished_chunks(p, 25)) == [0, 1]  # the torn third line is done again
    assert finished_chunks(p, 50) == {} and not p.exists()  # other chunks: start over
    p.write_text(json.dumps({"chunk": 0, "episodes": 1, "problems": {}, "metrics": {}}) + "\n")
    assert finished_chunks(p, 25) == {}  # written by a version that did not record its size: start over


@pytest.mark.parametrize("name, transferred, base", [
    ("voting", {"generator"}, {"aggregator"}), ("eval_opt", {"generator"}, {"evaluator"}),
    ("chain", {"generator", "refiner"}, {"verifier"}), ("search_answer", {"generator"}, {"searcher"}),
    ("debate", {"debater"}, set()), ("orch_workers", set(), {"orchestrator", "worker", "synthesizer"})])
def test_each_shipped_workflow_transfers_the_roles_that_answer(name, transferred, base):
    (wf,) = P.workflows(P.Options(configs=[f"examples/{name}"]))
    routing = P.transfer_routing(wf)
    assert {r for r, p in routing.items() if p == P.TRANSFER_POLICY} == transferred
    assert {r for r, p in routing.items() if p == "base"} == base
    units = {u.arm for u in P.seed_units(P.Options(configs=[f"examples/{name}"]), [wf], 0)}
    assert ("transfer" in units) == bool(transferred)  # no answering role: no transfer arm (the untrained one is it)


def test_two_configs_of_one_workflow_are_told_apart_share_their_structure_and_are_compared(tmp_path):
    from rolecall.shipped_configs import find_shipped

    cf = tmp_path / "voting-cf.yaml"  # the shipped voting config, trained with counterfactual credit
    cf.write_text(find_shipped("examples/voting").read_text() + "\nalgo: {estimator: {aggregator: counterfactual, '*': grpo}}\n")
    opts = P.Options(configs=["examples/voting", str(cf)])
    a, b = P.workflows(opts)
    assert (a.label, b.label) == ("voting", "voting-cf") and a.structure == b.structure == "voting"
    names = [u.name for u in P.untrained_units([a, b]) + P.seed_units(opts, [a, b], 0)]
    assert names.count("voting-untrained") == 1 and "voting-cf-untrained" not in names
    assert "voting-transfer-seed0" in names and "voting-cf-transfer-seed0" not in names
    assert "voting-cf-isolated-seed0" in names
    # (e): the variants against each other, paired by seed; the variant's (b) and (c) read the shared arms
    evals = {f"{arm}-seed{s}": _doc({"p1": [1, x], "p2": [0, 0]}) for s, x in ((0, 0), (1, 1))
             for arm in ("control", "voting-isolated", "voting-transfer")}
    evals.update({"voting-cf-isolated-seed0": _doc({"p1": [1, 1], "p2": [1, 0]}),
                  "voting-cf-isolated-seed1": _doc({"p1": [1, 1], "p2": [0, 0]}), "voting-untrained": _doc({"p1": [0], "p2": [0]})})
    plan = {"seeds": [0, 1], "matched": {}, "workflows": [
        {"label": "voting", "routings": ["isolated"], "family": "voting", "structure": "voting"},
        {"label": "voting-cf", "routings": ["isolated"], "family": "voting", "structure": "voting"}]}
    qs = {q["id"]: q for q in ask(evals, plan)}
    e = qs["e/voting-isolated/voting-cf-isolated"]
    # seed 0: p1 .5 - 1, p2 0 - .5; seed 1: p1 1 - 1, p2 0 - 0 -> (-.5 - .5 + 0 + 0) / 4 = -0.25
    assert e["estimate"] == pytest.approx(-0.25) and e["A"] == "voting-isolated" and e["B"] == "voting-cf-isolated"
    assert qs["c/voting-cf-isolated"]["B"] == "voting-untrained"
    assert qs["b/trained_vs_transfer/voting-cf-isolated"]["B"] == "voting-transfer"
    assert not any(q.startswith("b/transfer/voting-cf") for q in qs)
