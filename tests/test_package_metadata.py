"""What a user of the package sees: its version, licence and type information."""
from __future__ import annotations

import tomllib
from pathlib import Path

from typer.testing import CliRunner

import rolecall
from rolecall.cli import app

ROOT = Path(__file__).parent.parent


def test_version_is_one_number_everywhere():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert rolecall.__version__ == project["version"]
    res = CliRunner().invoke(app, ["--version"])
    assert res.exit_code == 0 and res.output.strip() == f"rolecall {rolecall.__version__}"


def test_licence_and_typing_marker_ship():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "Apache License" in (ROOT / "LICENSE").read_text()[:200]
    assert project["project"]["license"] == {"text": "Apache-2.0"}
    assert "License :: OSI Approved :: Apache Software License" in project["project"]["classifiers"]
    assert (Path(rolecall.__file__).parent / "py.typed").is_file()
    assert "py.typed" in project["tool"]["setuptools"]["package-data"]["rolecall"]
