"""The configs installed with the package: found by name, listed, copied, and inside the wheel."""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rolecall.cli import app
from rolecall.config import ConfigError, load_config
from rolecall.shipped_configs import CONFIG_ROOT, copy_configs, find_shipped, shipped_configs

ROOT = Path(__file__).parent.parent


def test_the_repository_configs_folder_is_the_shipped_one():
    assert (ROOT / "configs").resolve() == CONFIG_ROOT
    names = shipped_configs()
    assert {"examples/voting", "examples/deliberation", "grids/cpu", "paper/math-voting-ip",
            "paper/maporl/gsm8k-debate-cotrained"} <= set(names)


@pytest.mark.parametrize("name", ["examples/voting", "examples/voting.yaml", "configs/examples/voting.yaml",
                                  "./configs/examples/voting.yml"])
def test_a_shipped_config_is_found_by_name_from_anywhere(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)  # no configs/ folder here
    assert find_shipped(name) == CONFIG_ROOT / "examples" / "voting.yaml"
    assert load_config(name).workflow.name == "voting"


def test_a_missing_config_says_where_to_look(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="nor is it a shipped config; `rolecall configs` lists those"):
        load_config("examples/votin.yaml")


def test_configs_lists_and_copies(tmp_path):
    res = CliRunner().invoke(app, ["configs"])
    assert res.exit_code == 0
    assert all(name in res.output for name in shipped_configs())
    res = CliRunner().invoke(app, ["configs", "examples/debate", "grids/paper", "--copy", str(tmp_path / "mine")])
    assert res.exit_code == 0, res.output
    copied = {str(p.relative_to(tmp_path / "mine")) for p in (tmp_path / "mine").rglob("*.yaml")}
    # The paper grid names its cells' configs as ../paper/...: that folder comes along.
    assert {"examples/debate.yaml", "grids/paper.yaml", "paper/math-voting-ip.yaml"} <= copied
    assert "examples/voting.yaml" not in copied
    assert load_config(tmp_path / "mine" / "examples" / "debate.yaml").workflow.name == "debate"
    # A second copy refuses to overwrite, writes nothing, and names the file.
    (tmp_path / "mine" / "examples" / "debate.yaml").write_text("# edited\n")
    res = CliRunner().invoke(app, ["configs", "examples/debate", "--copy", str(tmp_path / "mine")])
    assert res.exit_code != 0 and "debate.yaml exists" in res.output
    assert (tmp_path / "mine" / "examples" / "debate.yaml").read_text() == "# edited\n"
    res = CliRunner().invoke(app, ["configs", "nope/x", "--copy", str(tmp_path / "mine")])
    assert res.exit_code != 0 and "no shipped config named ['nope/x']" in res.output
    with pytest.raises(FileExistsError):
        copy_configs(["examples/debate"], tmp_path / "mine")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(dist), str(ROOT)], check=True, capture_output=True)
    (built,) = dist.glob("rolecall-*.whl")
    return built


def test_a_fresh_venv_with_only_the_wheel_lists_the_configs(wheel, tmp_path):
    """A new virtual environment, the wheel installed without dependencies and without an index:
    the configs are in it (listing them needs nothing else)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    py = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], check=True,
                   capture_output=True)
    code = ("import rolecall, rolecall.shipped_configs as s; names = s.shipped_configs(); "
            "print(rolecall.__file__); print(len(names)); print(s.find_shipped('configs/examples/voting.yaml'))")
    work = tmp_path / "elsewhere"
    work.mkdir()
    out = subprocess.run([str(py), "-c", code], cwd=work, capture_output=True, text=True, check=True,
                         env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}).stdout.split()
    assert out[0].startswith(str(venv)) and int(out[1]) == len(shipped_configs())
    assert out[2].startswith(str(venv)) and out[2].endswith("examples/voting.yaml")


def test_the_built_wheel_carries_the_configs_and_finds_them_without_the_repository(wheel, tmp_path):
    """Unpack the wheel alone on the path (dependencies still from this environment) and load a
    shipped config by name from a folder with no repository in sight."""
    with zipfile.ZipFile(wheel) as z:
        files = set(z.namelist())
        z.extractall(tmp_path / "site")
    assert {"rolecall/configs/examples/voting.yaml", "rolecall/configs/paper/maporl/gsm8k-debate-cotrained.yaml",
            "rolecall/configs/grids/cpu.yaml", "rolecall/py.typed"} <= files
    assert any(f.endswith("licenses/LICENSE") or f.endswith("/LICENSE") for f in files)
    code = ("import rolecall, rolecall.config as c; "
            "print(rolecall.__file__); print(c.load_config('configs/examples/debate.yaml').workflow.name)")
    work = tmp_path / "elsewhere"
    work.mkdir()
    out = subprocess.run([sys.executable, "-c", code], cwd=work, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(tmp_path / "site")}).stdout.split()
    assert out[0].startswith(str(tmp_path / "site")) and out[1] == "debate"


def test_a_shipped_grid_is_found_by_name(tmp_path, monkeypatch):
    from rolecall.grid.spec import GridError, load_grid

    monkeypatch.chdir(tmp_path)
    assert load_grid("grids/smoke") is not None
    with pytest.raises(GridError, match="nor is it a shipped grid"):
        load_grid("grids/smok.yaml")
