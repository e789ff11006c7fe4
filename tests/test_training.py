"""Training on a tiny real model: adapter isolation, end-to-end runs, exact resume, bad inputs."""
from __future__ import annotations

import json
import random

import pytest
import yaml
import torch
from typer.testing import CliRunner

from rolecall.cli import app
from rolecall.config import load_config
from rolecall.engines.base import GenRequest
from rolecall.algo.batch import Row
from rolecall.rundir.checkpoint import latest_checkpoint
from rolecall.train.launch import train
from rolecall.train.stack import build_stack
from rolecall.train.step import problems_for_step
from rolecall.algo.update import update_policy


def _cfg(model_dir, *extra):
    return load_config(None, [f"model.path={model_dir}", "rollout.problems_per_step=2", "rollout.group_size=4",
                              "task.n_val=8", "rollout.max_new_tokens=6", "train.threads=2", *extra])


def _snapshot(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _rows(stack, policy, n=6):
    """Real sampled turns with hand-set, non-zero advantages."""
    torch.manual_seed(0)
    outs = stack.engine.generate([GenRequest([{"role": "user", "content": f"{i}+{i}"}], policy, 6)
                                  for i in range(n)], temperature=1.0)
    return [Row(o.prompt_ids + o.completion_ids, len(o.prompt_ids), o.logprobs, (-1.0) ** i, "generator", "generator0")
            for i, o in enumerate(outs)]


def test_training_one_adapter_leaves_others_and_base_bit_identical(tiny_model_dir):
    stack = build_stack(_cfg(tiny_model_dir))  # voting, Isolated-Policy: adapters generator + aggregator
    cfg = stack.cfg
    before = _snapshot(stack.model)
    rng = random.Random(0)
    for _ in range(2):  # two steps: the second would expose stale momentum on other adapters
        update_policy(stack.model, "generator", _rows(stack, "generator"), stack.optims["generator"],
                      cfg.algo, cfg.optim, pad_id=stack.tok.pad_token_id, temperature=1.0, rng=rng)
    after = _snapshot(stack.model)
    changed = {n for n in before if not torch.equal(before[n], after[n])}
    assert changed, "the trained adapter did not move"
    assert all(".generator." in n and "lora_" in n for n in changed), sorted(changed)[:5]
    assert any(".generator." in n and "lora_A" in n for n in changed)


def test_frozen_policy_never_moves_in_full_steps(tiny_model_dir, tmp_path):
    cfg = _cfg(tiny_model_dir, "routing={generator: gen, aggregator: agg}",
               "policies={gen: {trainable: true}, agg: {trainable: false}}", "train.steps=2")
    stack = build_stack(cfg)
    assert stack.routing.trainable == ("gen",) and set(stack.optims) == {"gen"}
    frozen = [p for n, p in stack.model.named_parameters() if ".agg." in n]
    assert frozen and not any(p.requires_grad for p in frozen)


def test_two_step_train_writes_a_complete_run_directory(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["train", f"model.path={tiny_model_dir}", "rollout.problems_per_step=2",
                                   "rollout.group_size=4", "task.n_val=8", "rollout.max_new_tokens=6",
                                   "--steps", "2", "--out", str(out)])
    assert res.exit_code == 0, res.output
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "val/accuracy" in r] == [0, 2]
    steps = [r for r in rows if "val/accuracy" not in r]
    assert [r["step"] for r in steps] == [1, 2]
    for role in ("generator", "aggregator"):
        for m in ("reward_mean", "loss", "chi2_token", "training_ppl", "grad_norm", "entropy", "clip_frac", "completion_len"):
            assert f"role/{role}/{m}" in steps[0], f"role/{role}/{m}"
        assert f"policy/{role}/grad_norm" in steps[0]
    ckpt = latest_checkpoint(out)
    assert ckpt is not None and ckpt.name == "step_2"
    for pol in ("generator", "aggregator"):
        assert (ckpt / pol / "adapter_model.safetensors").is_file()
        assert (ckpt / pol / "adapter_config.json").is_file()
    assert (out / "config.yaml").is_file() and (out / "samples.jsonl").stat().st_size > 0
    # eval on the run directory reads the latest checkpoint
    res = CliRunner().invoke(app, ["eval", str(out)])
    assert res.exit_code == 0, res.output
    assert 0.0 <= json.loads(res.stdout)["val/accuracy"] <= 1.0


def _load_adapters(ckpt):
    from safetensors.torch import load_file

    return {p.name: load_file(str(p / "adapter_model.safetensors")) for p in ckpt.iterdir() if p.is_dir()}


def test_resume_continues_the_same_trajectory(tmp_path):
    """2 steps + stop + resume + 2 steps == 4 straight steps: same problems, samples, weights, metrics.

    Uses the embedded model: it answers some problems right, so rewards are mixed and the
    weights really move (a random model scores 0 everywhere and would prove nothing).
    """
    cfg = lambda: load_config(None, ["rollout.problems_per_step=2", "rollout.group_size=4", "task.n_val=8",
                                     "rollout.max_new_tokens=16", "train.threads=2", "train.steps=4",
                                     "train.checkpoint_every=1", "train.val_every=2"])
    straight, resumed = tmp_path / "a", tmp_path / "b"
    train(cfg(), straight)
    train(cfg(), resumed, stop_after=2)
    assert latest_checkpoint(resumed).name == "step_2"
    train(cfg(), resumed, resume=True)
    a, b = _load_adapters(latest_checkpoint(straight)), _load_adapters(latest_checkpoint(resumed))
    assert a.keys() == b.keys() == {"generator", "aggregator"}
    for pol in a:
        for k in a[pol]:
            torch.testing.assert_close(a[pol][k], b[pol][k], atol=1e-6, rtol=0)
    strip = lambda rows: [{k: v for k, v in r.items() if not k.startswith(("time/", "mem/"))} for r in rows]  # the machine's, not the run's
    rows_a = strip(json.loads(x) for x in (straight / "metrics.jsonl").read_text().splitlines())
    rows_b = strip(json.loads(x) for x in (resumed / "metrics.jsonl").read_text().splitlines())
    assert rows_a == rows_b
    assert any(r.get("adv/adv_abs_mean", 0) > 0 for r in rows_a), "no learning signal: test would prove nothing"
    lora_B = [v for k, v in a["generator"].items() if "lora_B" in k]
    assert any(v.abs().sum() > 0 for v in lora_B), "weights never moved"


def test_problem_order_is_a_function_of_the_step(tiny_model_dir):
    train_P = [object() for _ in range(10)]
    a = [problems_for_step(train_P, 4, 0, s) for s in range(1, 6)]
    assert a == [problems_for_step(train_P, 4, 0, s) for s in range(1, 6)]
    first_epoch = a[0] + a[1] + a[2][:2]
    assert len(set(map(id, first_epoch))) == 10  # one epoch covers every problem once


@pytest.mark.parametrize("args, needle", [
    (["rollout.group_sizes=3"], "rollout.group_sizes"),
    (["routing={generator: g, aggregator: a}", "policies={g: {}}"], "routing"),
    (["model.path=/nonexistent/model"], "model.path"),
    (["task.n_val=20000"], "task.n_val"),
])
def test_bad_input_fails_with_a_clear_error(tiny_model_dir, tmp_path, args, needle):
    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["train", *args, "--out", str(out), "--steps", "1"])
    assert res.exit_code == 2, res.output
    assert needle in res.output
    assert not (out / "checkpoints").exists()


EXAMPLES = sorted((__import__("pathlib").Path(__file__).parent.parent / "configs" / "examples").glob("*.yaml"))


def test_every_shipped_workflow_has_an_example_config():
    from rolecall.workflows import WORKFLOWS

    # The workflows shipped so far each have one; a workflow added as one file need not.
    shipped = {"single", "eval_opt", "voting", "orch_workers", "chain", "debate", "search_answer", "deliberation"}
    assert shipped <= set(WORKFLOWS) and shipped <= {p.stem for p in EXAMPLES}
    # Any other example config trains a user's workflow (module:Class), as examples/ shows.
    for p in EXAMPLES:  # a variant of a shipped workflow is named <workflow>-<variant> (voting-ray)
        if p.stem.split("-")[0] not in WORKFLOWS:
            assert ":" in yaml.safe_load(p.read_text())["workflow"]["name"], p


# A meta-policy example trains no LLM step: its stages run in test_deliberation.py.
# One on Ray rollout workers runs in test_ray_rollout.py (it needs a Ray instance of its own).
LLM_EXAMPLES = [p for p in EXAMPLES if "metapolicy" not in (c := yaml.safe_load(p.read_text()))
                and not c.get("rollout", {}).get("actors")]


@pytest.mark.parametrize("example", LLM_EXAMPLES, ids=lambda p: p.stem)
def test_each_example_config_trains_one_step(tiny_model_dir, tmp_path, example):
    res = CliRunner().invoke(app, ["train", str(example), f"model.path={tiny_model_dir}", "rollout.problems_per_step=2",
                                   "rollout.group_size=2", "task.n_val=4", "rollout.max_new_tokens=4",
                                   "rollout.max_new_tokens_by_role={}", "--steps", "1", "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    rows = [json.loads(x) for x in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 1]
