"""`rolecall verify math`: one JSON object per call, stable keys, clear errors."""
from __future__ import annotations

import json

from typer.testing import CliRunner

from rolecall.cli import app


def _verify(*args, stdin=None):
    return CliRunner().invoke(app, ["verify", "math", *args], input=stdin)


def test_verify_math_reads_stdin_and_prints_score_and_status():
    res = _verify("--gold", "1/2", "--completion", "-", stdin="<think>\\boxed{3}</think> so \\boxed{0.5}")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["score"] == 1.0 and out["status"] == "ok" and out["extracted"] == "0.5"


def test_verify_math_reports_wrong_and_missing_answers(tmp_path):
    f = tmp_path / "c.txt"
    f.write_text("\\boxed{7}")
    assert json.loads(_verify("--gold", "8", "--completion", str(f)).stdout)["status"] == "wrong"
    f.write_text("no box here")
    out = json.loads(_verify("--gold", "8", "--completion", str(f), "--missing-box-penalty", "0.5").stdout)
    assert out == {"score": -0.5, "status": "no_answer", "extracted": None, "gold": "8"}


def test_verify_math_missing_file_is_a_clear_error(tmp_path):
    res = _verify("--gold", "8", "--completion", str(tmp_path / "nope.txt"))
    assert res.exit_code == 2 and "no such file" in res.output


def _code(*args, stdin=None):
    return CliRunner().invoke(app, ["verify", "code", *args], input=stdin)


def test_verify_code_runs_the_last_fence_and_prints_one_json_object(tmp_path, isolated_sandbox):
    tests = tmp_path / "tests.json"
    tests.write_text(json.dumps([{"input": "1 2\n", "output": "3\n", "testtype": "stdin"},
                                 {"input": "10 20\n", "output": "30\n", "testtype": "stdin"}]))
    good = "First try:\n```python\nprint(0)\n```\nFixed:\n```python\na, b = map(int, input().split())\nprint(a + b)\n```\n"
    out = json.loads(_code("--tests", str(tests), "--completion", "-", stdin=good).stdout)
    assert (out["score"], out["status"], out["passed"], out["total"]) == (1.0, "ok", 2, 2)
    half = "```python\na, b = map(int, input().split())\nprint(3)\n```"
    out = json.loads(_code("--tests", str(tests), "--completion", "-", "--mode", "pass_rate", stdin=half).stdout)
    assert (out["score"], out["status"]) == (0.5, "wrong")
    out = json.loads(_code("--tests", str(tests), "--completion", "-", stdin="no code at all").stdout)
    assert (out["score"], out["status"]) == (0.0, "no_answer")


def test_verify_code_functional_tests_take_the_function_name(tmp_path, isolated_sandbox):
    tests = tmp_path / "tests.json"
    tests.write_text(json.dumps({"inputs": [[1, 2], [5, 5]], "outputs": [3, 10]}))
    prog = "```python\nclass Solution:\n    def add(self, a, b):\n        return a + b\n```"
    out = json.loads(_code("--tests", str(tests), "--fn-name", "add", "--completion", "-", stdin=prog).stdout)
    assert (out["score"], out["status"]) == (1.0, "ok")


def test_verify_code_bad_tests_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "tests.json"
    bad.write_text("[{not json")
    res = _code("--tests", str(bad), "--completion", "-", stdin="x")
    assert res.exit_code == 2 and "not valid JSON" in res.output
    res = _code("--tests", str(tmp_path / "missing.json"), "--completion", "-", stdin="x")
    assert res.exit_code == 2 and "no such file" in res.output
    res = _code("--tests", str(bad), "--completion", "-", "--mode", "most", stdin="x")
    assert res.exit_code == 2 and "all_pass, pass_rate" in res.output


def test_verify_math_checker_and_deadline_options():
    res = _verify("--gold", "120", "--completion", "-", "--checker", "strict", stdin="\\boxed{5!}")
    assert json.loads(res.stdout)["status"] == "wrong"
    res = _verify("--gold", "120", "--completion", "-", stdin="\\boxed{5!}")
    assert json.loads(res.stdout)["status"] == "ok"
    res = _verify("--gold", "5", "--completion", "-", "--deadline", "1", stdin="\\boxed{2^{2^{2^{2^{100}}}}}")
    out = json.loads(res.stdout)
    assert out["score"] == 0.0 and out["status"] == "pathological", out  # the answer broke the judge: it is wrong
    res = _verify("--gold", "1", "--completion", "-", "--checker", "sympy", stdin="\\boxed{1}")
    assert res.exit_code == 2 and "math_verify, strict" in res.output


def _gym(*args, stdin=None):
    return CliRunner().invoke(app, ["verify", "reasoning_gym", *args], input=stdin)


def test_verify_math_takes_the_answer_from_fallback():
    out = json.loads(_verify("--gold", "7", "--completion", "-", "--answer-from", "boxed_or_last_number",
                             stdin="3 + 4 is 7").stdout)
    assert (out["score"], out["status"], out["extracted"]) == (1.0, "ok", "7")
    res = _verify("--gold", "7", "--completion", "-", "--answer-from", "last", stdin="7")
    assert res.exit_code == 2 and "--answer-from" in res.output and "boxed_or_last_number" in res.output


def test_verify_reasoning_gym_regenerates_the_problem_and_scores_with_its_own_scorer():
    import pytest

    pytest.importorskip("reasoning_gym")
    import reasoning_gym

    opts = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}
    entry = reasoning_gym.create_dataset("chain_sum", **opts, seed=5, size=4)[3]
    base = ["--gym", "chain_sum", "--options", json.dumps(opts), "--seed", "5", "--index", "3", "--completion", "-"]
    right = json.loads(_gym(*base, stdin=f"\\boxed{{{entry['answer']}}}").stdout)
    assert (right["score"], right["status"], right["gold"], right["question"]) == (1.0, "ok", entry["answer"],
                                                                                  entry["question"])
    assert right["problem"] == "chain_sum/5/3"
    wrong = json.loads(_gym(*base, stdin=f"\\boxed{{{int(entry['answer']) + 1}}}").stdout)
    assert (wrong["score"], wrong["status"]) == (0.0, "wrong")
    # a run's uid names the same problem; the default reads only a box, the fallback a bare number
    uid = ["--problem", "chain_sum/5/3", "--options", json.dumps(opts), "--completion", "-"]
    assert json.loads(_gym(*uid, stdin=f"it is {entry['answer']}").stdout)["status"] == "no_answer"
    fell = json.loads(_gym(*uid, "--answer-from", "boxed_or_last_number", stdin=f"it is {entry['answer']}").stdout)
    assert (fell["score"], fell["extracted_from"]) == (1.0, "last_number")


def test_verify_reasoning_gym_takes_a_configs_task_and_reward(tmp_path):
    import pytest

    pytest.importorskip("reasoning_gym")
    import reasoning_gym

    cfg = tmp_path / "c.yaml"
    cfg.write_text("task: {name: reasoning_gym, gym: chain_sum, seed: 9, gym_options: {min_terms: 2, max_terms: 2}}\n"
                   "reward: {name: reasoning_gym, answer_from: boxed_or_last_line, format_penalty: 0.25}\n")
    entry = reasoning_gym.create_dataset("chain_sum", min_terms=2, max_terms=2, seed=9, size=2)[1]
    out = json.loads(_gym("--config", str(cfg), "--index", "1", "--completion", "-",
                          stdin=f"Answer: {entry['answer']}").stdout)
    assert (out["score"], out["problem"], out["extracted_from"]) == (1.0, "chain_sum/9/1", "last_line")
    assert json.loads(_gym("--config", str(cfg), "--completion", "-", stdin="   ").stdout)["score"] == -0.25


@__import__("pytest").mark.parametrize("args, said", [
    (["--completion", "-"], "--gym"),
    (["--problem", "chain_sum/x/1", "--completion", "-"], "GYM/SEED/INDEX"),
    (["--gym", "chain_sum", "--options", "{not json", "--completion", "-"], "--options: not JSON"),
    (["--gym", "chain_sum", "--options", "[1]", "--completion", "-"], "JSON object"),
    (["--gym", "chain_sums", "--completion", "-"], "chain_sum"),
    (["--gym", "chain_sum", "--options", '{"bogus": 1}', "--completion", "-"], "--options"),
    (["--gym", "chain_sum", "--index", "-1", "--completion", "-"], "--index"),
    (["--config", "nope.yaml", "--completion", "-"], "no such file"),
])
def test_verify_reasoning_gym_errors_name_the_option(args, said):
    import pytest

    pytest.importorskip("reasoning_gym")
    res = _gym(*args, stdin="\\boxed{1}")
    assert res.exit_code == 2 and said in res.output, res.output
