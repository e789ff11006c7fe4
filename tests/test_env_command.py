"""`rolecall env`: what the machine gives rolecall, one fact a line (or JSON)."""
from __future__ import annotations

import json

from typer.testing import CliRunner

from rolecall.cli import app


def test_env_reports_torch_devices_engines_and_the_sandbox():
    res = CliRunner().invoke(app, ["env", "--json"])
    assert res.exit_code == 0, res.output
    found = json.loads(res.stdout)
    assert {"rolecall", "torch", "cuda", "vllm", "ray", "code sandbox", "embedded model"} <= set(found)
    assert found["torch"].startswith(__import__("torch").__version__)
    assert "not installed" in found["vllm"] or found["vllm"][0].isdigit()
    plain = CliRunner().invoke(app, ["env"])
    assert plain.exit_code == 0 and plain.stdout.splitlines()[0].startswith("rolecall ")
