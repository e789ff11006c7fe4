"""configs/paper/: every cell of Table 7 of "When Does Multi-Agent RL Improve LLM Workflows?
Workflow, Scale, and Policy-Sharing Tradeoffs" (arXiv 2605.24202) holds the paper's values,
and each one validates and dry-runs with a local tiny model and fixture data."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rolecall.cli import app
from rolecall.config import load_config

PAPER = Path(__file__).resolve().parent.parent / "configs" / "paper"
WORKFLOWS = ("eval_opt", "voting", "orch_workers")
CELLS = [f"{task}-{wf}-{r}" for task in ("math", "code") for wf in WORKFLOWS for r in ("sp", "ip")]
CELLS += ["math-single", "code-single"]

# Table 7, written out independently of the files: lengths are (prompt, response) tokens.
LENGTHS = {("math", "eval_opt"): (30720, 5120), ("math", "voting"): (20480, 5120),
           ("math", "orch_workers"): (20480, 5120), ("math", "single"): (20480, 5120)}
CODE_LENGTHS = (10240, 2048)
OPTIONS = {("math", "eval_opt"): {"rounds": 3}, ("code", "eval_opt"): {"rounds": 2},
           "voting": {"n_voters": 3}, "orch_workers": {"n_workers": 3}, "single": {}}


def _parts(cell: str) -> tuple[str, str, str | None]:
    task, rest = cell.split("-", 1)
    wf, _, route = rest.partition("-")
    return task, wf, route or None


def test_every_cell_is_present_and_nothing_else():
    assert sorted(p.stem for p in PAPER.glob("*.yaml")) == sorted(CELLS)


@pytest.mark.parametrize("cell", CELLS)
def test_cell_holds_table_7(cell, tmp_path):
    task, wf, route = _parts(cell)
    cfg = load_config(PAPER / f"{cell}.yaml", [f"data.path={tmp_path / 'rows.jsonl'}"])
    assert cfg.workflow.name == wf and cfg.workflow.prompts == f"paper_{task}"
    assert cfg.workflow.options == OPTIONS.get((task, wf), OPTIONS.get(wf))
    assert cfg.routing == {"sp": "shared", "ip": "isolated", None: "shared"}[route]
    assert (cfg.task.name, cfg.data.format) == ("dataset", {"math": "dapo_math", "code": "deepcoder"}[task])
    if task == "code":  # the paper's code split: the first 1,000 rows of a seed-42 shuffle
        assert (cfg.data.test_rows, cfg.data.split_seed) == (1000, 42)
    else:  # the paper's math split: 10 % held out, seed 42
        assert (cfg.data.test_rows, cfg.data.test_fraction, cfg.data.split_seed) == (None, 0.1, 42)
    assert cfg.reward.name == task
    if task == "code":
        assert cfg.reward.code_mode == "all_pass"
    assert cfg.model.enable_thinking is False
    # optimizer
    o = cfg.optim
    assert (o.lr, o.schedule, o.warmup_steps, o.grad_clip) == (2e-5, "cosine", 15, 1.0)
    # LoRA r 64, alpha 32, dropout 0, all linear modules
    lo = cfg.lora
    assert (lo.r, lo.alpha, lo.dropout, lo.target_modules) == (64, 32, 0.0, "all-linear")
    # GRPO, no KL, n = 8, PPO mini-batch of 64 problems, 1 PPO epoch, seq-mean-token-mean
    a = cfg.algo
    assert (a.estimator, a.group_by, a.clip_low, a.clip_high) == ("grpo", None, 0.2, 0.28)
    assert (a.loss_agg, a.mini_batch_problems, a.mini_batches, a.ppo_epochs) == ("seq-mean-token-mean", 64, None, 1)
    r = cfg.rollout
    assert (r.group_size, r.problems_per_step, r.temperature) == (8, 64, 0.7)
    assert (r.max_prompt_tokens, r.max_new_tokens) == (LENGTHS[(task, wf)] if task == "math" else CODE_LENGTHS)
    t = cfg.train
    assert (t.steps, t.val_every, t.checkpoint_every) == (500, 10, 5)


def _fixture(tmp_path: Path, task: str) -> Path:
    f = tmp_path / f"{task}.jsonl"
    if task == "math":
        rows = [{"prompt": f"What is {i}+{i}?", "solution": str(2 * i)} for i in range(20)]
    else:  # 1,000 held out (the paper's code split) + 18 to train on
        tests = json.dumps([{"input": "2\n", "output": "4\n", "testtype": "stdin"}])
        rows = [{"problem": f"Print double of n ({i}).", "tests": tests, "starter_code": ""} for i in range(1018)]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f


@pytest.mark.parametrize("cell", CELLS)
def test_cell_dry_runs_with_a_local_model_and_fixture_data(cell, tmp_path, tiny_model_dir, request):
    task, _, _ = _parts(cell)
    if task == "code":
        request.getfixturevalue("isolated_sandbox")  # the dry run starts the code verifier
    data = _fixture(tmp_path, task)
    res = CliRunner().invoke(app, ["train", str(PAPER / f"{cell}.yaml"), f"model.path={tiny_model_dir}",
                                   f"data.path={data}", "--dry-run", "--show-config"])
    assert res.exit_code == 0, res.output
    assert "lr: 2.0e-05" in res.stdout and f"path: {data}" in res.stdout
    # math: 20 rows, 10 % held out; code: 1,018 rows, the first 1,000 of the shuffle held out
    assert "preflight ok" in res.output and '"train_problems": 18' in res.output
    split = "10 % of rows held out with seed 42, the paper's math split" if task == "math" else \
        "the first 1000 rows of a seed-42 shuffle held out, the paper's code split"
    assert split in res.output


def test_dry_run_names_a_bad_dataset_row(tmp_path, tiny_model_dir, isolated_sandbox):
    data = _fixture(tmp_path, "code")
    rows = data.read_text().splitlines()
    rows[3] = json.dumps({"problem": "x", "tests": "[{not json"})
    data.write_text("\n".join(rows) + "\n")
    res = CliRunner().invoke(app, ["train", str(PAPER / "code-voting-sp.yaml"), f"model.path={tiny_model_dir}",
                                   f"data.path={data}", "--dry-run"])
    assert res.exit_code == 2
    assert "row 3" in res.output and "tests" in res.output and "malformed test JSON" in res.output


def test_dry_run_without_data_path_names_the_field(tiny_model_dir):
    res = CliRunner().invoke(app, ["train", str(PAPER / "math-voting-sp.yaml"), f"model.path={tiny_model_dir}",
                                   "--dry-run"])
    assert res.exit_code == 2 and "data.path" in res.output


MAPORL = PAPER / "maporl"


@pytest.mark.parametrize("name, routing", [("gsm8k-debate-cotrained", "isolated"),
                                           ("gsm8k-debate-frozen-peers", {"agent0": "learner", "agent1": "base",
                                                                          "agent2": "base"})])
def test_maporl_debate_presets_differ_only_in_who_trains(name, routing, tmp_path, tiny_model_dir):
    """Co-trained vs one trained debater against frozen peers: the same debate, one switch."""
    cfg = load_config(MAPORL / f"{name}.yaml", [f"data.path={tmp_path / 'rows.jsonl'}"])
    assert cfg.workflow.name == "debate" and cfg.data.format == "gsm8k"
    assert cfg.workflow.options["gamma"] == 0.3 and cfg.workflow.options["agents"] == "roles"
    assert cfg.routing == routing
    data = tmp_path / "gsm8k.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {i}+{i}?", "answer": f"{i}+{i}\n#### {2 * i}"}) + "\n"
                            for i in range(20)))
    res = CliRunner().invoke(app, ["train", str(MAPORL / f"{name}.yaml"), f"model.path={tiny_model_dir}",
                                   f"data.path={data}", "--dry-run"])
    assert res.exit_code == 0, res.output
    assert "preflight ok" in res.output and '"train_problems": 18' in res.output
