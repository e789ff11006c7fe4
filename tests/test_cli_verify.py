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
