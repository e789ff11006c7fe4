"""The supervised warm start: search_answer's demonstrations, fitting one policy's adapter, the
command's folder, and a run starting from it (embedded model, a few steps)."""
from __future__ import annotations

import asyncio
import json

import pytest
import torch
from peft import get_peft_model_state_dict
from typer.testing import CliRunner

from rolecall.cli import app
from rolecall.config import load_config
from rolecall.rewards.qa import normalize_answer
from rolecall.rundir.init_from import InitFromError
from rolecall.train.stack import build_stack
from rolecall.train.warm_start import collect, encode, fit, from_base, steps_for
from rolecall.types import Problem
from rolecall.workflows.search_answer import SearchAnswer

SMALL = ["workflow.name=search_answer", "task.name=multihop", "reward.name=qa", "task.people=12",
         "task.n_val=4", "workflow.options={hops: 1, top_k: 2, role_format: plain, "
         "abstain_word: unknown}", "rollout.max_new_tokens=8", "rollout.max_prompt_tokens=990"]


@pytest.fixture(scope="module")
def stack():
    s = build_stack(load_config(None, SMALL))
    yield s
    s.close()


def test_search_answer_demonstrates_both_roles_from_the_support_passages(stack):
    demos = collect(stack, stack.train_P[:20], held_out=0.25, seed=0)
    assert set(demos.train) == {"searcher", "generator"} and not demos.untrained_roles
    held = {d.messages[-1]["content"] for ds in demos.held_out.values() for d in ds}
    # the generator's two plays per question: the answer where the evidence holds it, the abstain word where not
    assert len(demos.held_out["generator"]) == 10 and len(demos.train["generator"]) == 30
    by_prompt = {p.prompt: p for p in stack.train_P[:20]}

    def problem_of(d):
        return next(p for q, p in by_prompt.items() if q in d.messages[-1]["content"])

    for d in demos.train["generator"]:
        problem = problem_of(d)
        holds = f" {normalize_answer(problem.answer)} " in f" {normalize_answer(d.messages[-1]['content'])} "
        assert (d.target, holds) in ((problem.answer, True), ("unknown", False))  # plain: the bare reply
    assert sum(d.target == "unknown" for d in demos.train["generator"]) == 15
    # hops: 1, so one query each: the first support passage's title (its entity, named in the question)
    assert len(demos.train["searcher"]) == 15
    for d in demos.train["searcher"]:
        problem = problem_of(d)
        assert d.target == problem.meta["support"][0].split(":", 1)[1] and d.target in problem.prompt
        assert "(nothing yet)" in d.messages[-1]["content"]
    # a held-out question is held out whole: none of its turns is trained on
    trained = {problem_of(d).uid for ds in demos.train.values() for d in ds}
    assert not trained & {next(p for q, p in by_prompt.items() if q in h).uid for h in held}


def test_the_searcher_is_shown_what_its_earlier_queries_found_and_stops_when_hops_remain():
    problem = Problem("q", "In which land was Bakor born?", "Kalis", {"context": [
        {"id": "a", "title": "Bakor", "text": "Bakor was born in Dumel."},
        {"id": "b", "title": "Dumel", "text": "Dumel is a town in Kalis."},
        {"id": "c", "title": "Zoth", "text": "Zoth is a land."}], "support": ["a", "b"]})
    demos = asyncio.run(SearchAnswer(hops=3, top_k=1, role_format="plain").demonstrations(problem))
    searcher = [d for d in demos if d.role == "searcher"]
    assert [d.target for d in searcher] == ["Bakor", "Dumel", "done"]
    assert "(nothing yet)" in searcher[0].messages[0]["content"]
    assert "Bakor was born in Dumel" in searcher[1].messages[0]["content"]
    assert "Dumel is a town in Kalis" in searcher[2].messages[0]["content"]
    two = asyncio.run(SearchAnswer(hops=2, top_k=1).demonstrations(problem))
    assert [d.target for d in two if d.role == "searcher"] == ["\\boxed{Bakor}", "\\boxed{Dumel}"]


def test_boxed_targets_and_workflows_without_demonstrations():
    problem = Problem("q", "In which land was Ba born?", "Ka", {"context": [
        {"id": "a", "title": "Ba", "text": "Ba was born in Do."}, {"id": "b", "title": "Do", "text": "Do is in Ka."}],
        "support": ["a", "b"]})
    boxed = asyncio.run(SearchAnswer(hops=1, top_k=2).demonstrations(problem))
    assert [(d.role, d.target) for d in boxed] == [("searcher", "\\boxed{Ba}"), ("generator", "\\boxed{Ka}"),
                                                   ("generator", "\\boxed{abstain}")]
    assert "Do is in Ka" not in boxed[2].messages[0]["content"] and "Ba was born in Do" in boxed[2].messages[0]["content"]
    from rolecall.workflows import build_workflow, load_prompts

    voting = build_workflow("voting", load_prompts("math"), {})
    assert asyncio.run(voting.demonstrations(problem)) == []


def test_fitting_lowers_the_targets_loss_and_moves_only_that_policy(stack):
    demos = collect(stack, stack.train_P[:16], held_out=0.0, seed=0).train["generator"]
    before = {k: v.clone() for k, v in get_peft_model_state_dict(stack.model, adapter_name="searcher").items()}
    gen0 = {k: v.clone() for k, v in get_peft_model_state_dict(stack.model, adapter_name="generator").items()}
    curve = fit(stack, "generator", demos, steps=10, batch=8, lr=0.02, seed=0)
    assert len(curve) == 10 and curve[-1]["nll"] < 0.7 * curve[0]["nll"]
    after = get_peft_model_state_dict(stack.model, adapter_name="searcher")
    assert all(torch.equal(before[k], after[k]) for k in before)
    gen = get_peft_model_state_dict(stack.model, adapter_name="generator")
    assert any(not torch.equal(gen0[k], gen[k]) for k in gen0)


def test_a_row_is_the_rendered_prompt_then_the_target_and_the_end_of_turn(stack):
    d = collect(stack, stack.train_P[:1], held_out=0.0, seed=0).train["generator"][0]
    row = encode(stack, "generator", d)
    text = stack.tok.decode(row.ids[row.n_prompt:])
    assert text.startswith(d.target) and row.ids[-1] == next(iter(stack.bases.values())).engine.stop_ids[0]
    assert row.advantage == 1.0 and len(row.rollout_logp) == row.n_completion


def test_the_command_writes_an_adapter_a_run_starts_from(tmp_path):
    out = tmp_path / "ws"
    # the config's own init_from (where its runs start: this warm start, not made yet) is ignored
    starts_here = f"policies={{searcher: {{}}, generator: {{init_from: '{out / 'generator'}'}}}}"
    r = CliRunner().invoke(app, ["warm-start", *SMALL, starts_here, "--out", str(out), "--epochs", "0.2",
                                 "--batch", "4", "--lr", "0.01"])
    assert r.exit_code == 0, r.output
    record = json.loads((out / "warm_start.json").read_text())
    assert set(record["policies"]) == {"searcher", "generator"}
    gen = record["policies"]["generator"]
    assert len(gen["curve"]) == gen["steps"] == steps_for(gen["train"], 0.2, 4)
    assert record["model"]["weights"] and record["overrides"][0] == "workflow.name=search_answer"
    assert "policies.generator.init_from=" in r.output
    cfg = load_config(None, [*SMALL, starts_here])
    assert from_base(cfg).policy_init() == {} and cfg.policy_init() == {"generator": str(out / "generator")}
    s = build_stack(cfg)
    try:
        from safetensors.torch import load_file

        saved = load_file(str(out / "generator" / "adapter_model.safetensors"))
        state = get_peft_model_state_dict(s.model, adapter_name="generator")
        assert saved.keys() == state.keys() and all(torch.equal(saved[k], state[k]) for k in saved)
    finally:
        s.close()
    # made on another base model: refused by name
    record["model"]["weights"] = "0" * 16
    (out / "warm_start.json").write_text(json.dumps(record))
    with pytest.raises(InitFromError, match="another base model"):
        build_stack(cfg).close()


def test_the_command_refuses_a_folder_of_other_files_and_a_workflow_without_demonstrations(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    r = CliRunner().invoke(app, ["warm-start", *SMALL, "--out", str(mine), "--epochs", "1"])
    assert r.exit_code == 2 and "notes.txt" in r.output and (mine / "notes.txt").read_text() == "keep me"
    gone = tmp_path / "gone"
    gone.symlink_to(tmp_path / "missing")
    r = CliRunner().invoke(app, ["warm-start", *SMALL, "--out", str(gone)])
    assert r.exit_code == 2 and "does not exist" in r.output, r.output
    r = CliRunner().invoke(app, ["warm-start", "--out", str(tmp_path / "v"), "task.n_val=4"])
    assert r.exit_code == 2 and "wrote no demonstrations" in r.output, r.output
    assert not (tmp_path / "v").exists()
