"""Training on local dataset files with the tiny model: math (DAPO form) and code (DeepCoder
form) fixtures, per-role verifier statuses in metrics.jsonl; config checks for the data section."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from rolecall.cli import app
from rolecall.config import ConfigError, load_config


def _rows(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _train(tmp_path, model_dir, *args):
    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["train", f"model.path={model_dir}", "task.name=dataset",
                                   "rollout.problems_per_step=2", "rollout.group_size=2",
                                   "rollout.max_new_tokens=8", "data.n_val=2", *args,
                                   "--steps", "2", "--out", str(out)])
    assert res.exit_code == 0, res.output
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


def test_two_steps_on_a_math_dataset(tiny_model_dir, tmp_path):
    data = _rows(tmp_path / "dapo.jsonl", [{"prompt": f"{i}+{i}", "solution": str(2 * i)} for i in range(12)])
    rows = _train(tmp_path, tiny_model_dir, f"data.path={data}", "data.format=dapo_math", "workflow.name=voting")
    steps = [r for r in rows if "val/accuracy" not in r]
    assert [r["step"] for r in steps] == [1, 2]
    for role in ("generator", "aggregator"):
        statuses = {k: v for k, v in steps[0].items() if k.startswith(f"role/{role}/status_")}
        assert statuses and sum(statuses.values()) == pytest.approx(1.0)


def test_config_data_section_is_checked_before_anything_loads(tmp_path):
    with pytest.raises(ConfigError, match=r"data\.path: required"):
        load_config(None, ["task.name=dataset"])
    with pytest.raises(ConfigError, match="set task.name=dataset"):
        load_config(None, ["data.path=x.jsonl"])
    with pytest.raises(ConfigError, match=r"reward\.name: 'deepcoder' rows are graded by 'code'"):
        load_config(None, ["task.name=dataset", "data.path=x.jsonl", "data.format=deepcoder"])
    with pytest.raises(ConfigError, match=r"model\.device"):
        load_config(None, ["model.device=tpu"])
    with pytest.raises(ConfigError, match=r"data\.on_bad_row"):
        load_config(None, ["data.on_bad_row=ignore"])


def test_bad_rows_stop_the_run_or_are_skipped_and_counted(tiny_model_dir, tmp_path):
    rows = [{"prompt": f"{i}+{i}", "solution": str(2 * i)} for i in range(12)]
    rows[4]["solution"] = ""
    data = _rows(tmp_path / "dapo.jsonl", rows)
    res = CliRunner().invoke(app, ["train", f"model.path={tiny_model_dir}", "task.name=dataset",
                                   f"data.path={data}", "--steps", "1", "--out", str(tmp_path / "r1")])
    assert res.exit_code == 2 and "row 4" in res.output and "solution" in res.output
    assert not (tmp_path / "r1" / "checkpoints").exists()
    res = CliRunner().invoke(app, ["train", f"model.path={tiny_model_dir}", "task.name=dataset",
                                   f"data.path={data}", "data.on_bad_row=skip", "--dry-run"])
    assert res.exit_code == 0, res.output
    assert "1 skipped" in res.output


def test_a_failing_verifier_skips_steps_then_halts_with_a_checkpoint(tiny_model_dir, tmp_path, monkeypatch):
    """A crashed verifier is not a wrong answer: unscorable is not wrong; too many skip the step; repeats halt the run."""
    from rolecall.rewards import Score
    from rolecall.compose import parts

    class Broken:
        name = "math"

        def score_many(self, completions, problems):
            return [Score(None, "unscorable", info={"reason": "judge crashed"}) for _ in completions]

        def close(self):
            pass

    monkeypatch.setattr(parts, "build_verifier", lambda cfg: Broken())
    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["train", f"model.path={tiny_model_dir}", "rollout.problems_per_step=2",
                                   "rollout.group_size=2", "rollout.max_new_tokens=4", "task.n_val=2",
                                   "reward.max_skipped_steps=2", "--steps", "5", "--out", str(out)])
    assert res.exit_code == 2
    assert "halted at step 2" in res.output and "unscorable" in res.output
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "val/accuracy" not in r]
    assert [r["step"] for r in steps] == [1, 2] and all(r["skipped/unscorable"] == 1.0 for r in steps)
    assert all(not any(k.startswith("policy/") for k in r) for r in steps)  # no update ran
    assert (out / "checkpoints" / "step_2").is_dir()


def test_auto_math_checker_is_strict_on_arithmetic_and_math_verify_on_datasets():
    """On the arithmetic task math-verify would reward echoing the question (12+34 == 46)."""
    from rolecall.rewards.verifier import build_verifier
    from rolecall.types import Problem

    assert load_config(None, []).reward_cfg().math_checker == "strict"
    ds = load_config(None, ["task.name=dataset", "data.path=x.jsonl"])
    assert ds.reward_cfg().math_checker == "math_verify"
    assert load_config(None, ["reward.math_checker=math_verify"]).reward_cfg().math_checker == "math_verify"
    v = build_verifier(load_config(None, []).reward_cfg())
    assert v.score_many(["\\boxed{12+34}"], [Problem("12+34", "12+34", "46")])[0].status == "wrong"


def _code_rows(n):
    stdin = json.dumps([{"input": "3\n", "output": "6\n", "testtype": "stdin"}])
    func = json.dumps([{"input": "[1, 2]", "output": "3", "testtype": "functional"}])
    rows = []
    for i in range(n):
        if i % 2:
            rows.append({"problem": f"Print twice n ({i}).", "tests": stdin, "starter_code": ""})
        else:
            rows.append({"problem": f"Add two numbers ({i}).", "tests": func, "starter_code": "def add(xs):\n    pass",
                         "metadata": json.dumps({"func_name": "add"})})
    return rows


def test_two_steps_on_a_code_dataset_log_statuses_per_role(tiny_model_dir, tmp_path, isolated_sandbox):
    data = _rows(tmp_path / "deepcoder.jsonl", _code_rows(12))
    rows = _train(tmp_path, tiny_model_dir, f"data.path={data}", "data.format=deepcoder", "reward.name=code",
                  "workflow.name=eval_opt", "workflow.prompts=code", "workflow.options={rounds: 2}",
                  "reward.code_timeout_s=2")
    steps = [r for r in rows if "val/accuracy" not in r]
    assert [r["step"] for r in steps] == [1, 2]
    for role in ("generator", "evaluator"):
        statuses = {k: v for k, v in steps[0].items() if k.startswith(f"role/{role}/status_")}
        assert statuses and sum(statuses.values()) == pytest.approx(1.0), statuses


def test_code_verifier_scores_real_programs_through_the_training_stage(isolated_sandbox):
    """score() with the code verifier: a right program, a wrong one, no code block, a crash."""
    from rolecall.rewards.code import parse_tests
    from rolecall.rewards.verifier import CodeVerifier
    from rolecall.algo.scoring import score
    from rolecall.types import Episode, Problem

    tests = parse_tests([{"input": "3\n", "output": "6\n", "testtype": "stdin"},
                         {"input": "5\n", "output": "10\n", "testtype": "stdin"}])
    prob = Problem("p", "double", "", {"kind": "code", "tests": tests})
    finals = ["```python\nprint(int(input()) * 2)\n```", "```python\nprint(6)\n```", "no code",
              "```python\nraise ValueError('x')\n```"]
    eps = [Episode(problem=prob, sample=i, final_answer=f) for i, f in enumerate(finals)]
    v = CodeVerifier(timeout_s=2, workers=2)
    try:
        score(eps, v)
    finally:
        v.close()
    assert [e.status for e in eps] == ["ok", "wrong", "no_answer", "runtime_error"]
    assert [e.reward for e in eps] == [1.0, 0.0, 0.0, 0.0]


def test_a_dry_run_says_a_missing_dataset_first_and_shows_the_config_only_when_asked(tmp_path):
    from typer.testing import CliRunner

    from rolecall.cli import app

    res = CliRunner().invoke(app, ["train", "--dry-run", "task.name=dataset", f"data.path={tmp_path / 'nope.jsonl'}"])
    assert res.exit_code != 0 and res.output.lstrip().startswith("error:") and "nope.jsonl" in res.output
    assert len(res.output.splitlines()) < 12 and "model:" not in res.output
    res = CliRunner().invoke(app, ["train", "--dry-run", "--show-config", "train.steps=3"])
    assert res.exit_code == 0 and "preflight ok" in res.output and "steps: 3" in res.output
    assert res.output.index("preflight ok") < res.output.index("steps: 3")
    assert CliRunner().invoke(app, ["train", "--show-config"]).exit_code != 0
