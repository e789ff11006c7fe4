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
