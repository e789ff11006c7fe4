"""`python -m benchmarks`: one entry that lists every benchmark and runs one by name."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.__main__ import BENCHMARKS, HELPERS, summary  # noqa: E402


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmarks", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_every_module_is_a_listed_benchmark_or_a_named_helper():
    modules = {p.stem for p in (ROOT / "benchmarks").glob("*.py")}
    assert modules == set(BENCHMARKS) | set(HELPERS), (modules ^ (set(BENCHMARKS) | set(HELPERS)))
    assert not set(BENCHMARKS) & set(HELPERS)
    assert all(summary(name) for name in BENCHMARKS), [n for n in BENCHMARKS if not summary(n)]


def test_the_entry_lists_every_benchmark_and_refuses_an_unknown_name():
    listed = _run()
    assert listed.returncode == 0, listed.stderr
    assert all(f"  {name} " in listed.stdout for name in BENCHMARKS)
    wrong = _run("no_such_benchmark")
    assert wrong.returncode == 2 and "no benchmark named 'no_such_benchmark'" in wrong.stderr


def test_a_benchmark_runs_by_name_with_its_own_arguments():
    helped = _run("diagnostics_overhead", "--help")
    assert helped.returncode == 0, helped.stderr
    assert "--pairs" in helped.stdout


def test_the_recorded_command_is_the_one_typed():
    out = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, '.'); "
                          "from benchmarks.provenance import command; print(command())", "x", "--y"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip().startswith("python -c ") and out.stdout.strip().endswith(" x --y"), out


def _reproducing_commands() -> dict[str, str]:
    """benchmarks/results/README.md's table: result file (or folder) -> its command."""
    table = (ROOT / "benchmarks" / "results" / "README.md").read_text()
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| `([^`]+)` \| (.+) \|$", table, re.M)}


def test_every_recorded_result_names_a_command_whose_program_is_here():
    commands = _reproducing_commands()
    results = {p.name + ("/" if p.is_dir() else "") for p in (ROOT / "benchmarks" / "results").iterdir()
               if p.name not in ("README.md", "history")}
    assert set(commands) == results, set(commands) ^ results
    for result, text in commands.items():
        if result.endswith(".md"):
            continue  # notes, not a measurement
        cmd = re.match(r"`([^`]+)`", text)  # the command; what follows it is a note
        assert cmd, (result, text)
        for part in cmd.group(1).split(" && "):
            words = part.split()
            if words[:3] == ["python", "-m", "benchmarks"]:
                assert words[3] in BENCHMARKS, (result, part)
            elif words[0] == "rolecall":
                files = [w for w in words if w.endswith(".yaml")]
                assert files and all((ROOT / f).is_file() for f in files) or words[1:3] == ["grid", "record"] \
                    or words[1] in MAKES_A_MODEL, (result, part)
            else:
                script = words[1] if words[0] in ("bash", "python") else words[0]
                assert (ROOT / script).is_file(), (result, part)


MAKES_A_MODEL = ("cut-model", "make-base", "get-model")  # a step before a grid: its input, no config
SMOKE = ["train.steps=1", "train.val_every=1", "task.n_val=4", "rollout.problems_per_step=2", "rollout.group_size=2"]


def _embedded_grid_commands() -> list[tuple[str, str, tuple[str, ...]]]:
    """(result, grid file, the commands before it) for every recorded result a `rolecall grid ...
    --record` makes on the embedded model (a grid whose cells start from configs/examples/: the
    real tier's need SmolLM2); the commands before it make its inputs (`rolecall cut-model ...`)."""
    import yaml

    out = []
    for result, text in _reproducing_commands().items():
        cmd = re.match(r"`([^`]+)`", text)
        parts = cmd.group(1).split(" && ") if cmd else []
        for i, part in enumerate(parts):
            words = part.split()
            if words[:2] == ["rolecall", "grid"] and "--record" in words and (
                    yaml.safe_load((ROOT / words[2]).read_text()).get("config") or "").startswith("../examples/"):
                out.append((result, words[2], tuple(parts[:i])))
    return out


def _smoke_args(grid: str) -> list[str]:
    """Overrides and a cell choice that run `grid` at smoke size: one step where the grid file
    leaves `train.steps` to the command line; where an axis sets each cell's steps (a grid refuses
    to override an axis), the cell with the fewest, validated only at its start and end."""
    import yaml

    spec = yaml.safe_load((ROOT / grid).read_text())
    budgets = [(v["train.steps"], name, label) for name, axis in (spec.get("axes") or {}).items()
               if isinstance(axis, dict) for label, v in axis.items() if isinstance(v, dict) and "train.steps" in v]
    if not budgets:
        return [*SMOKE, "--only", "seed=seed0"]
    steps, name, label = min(budgets)
    return [*(a for a in SMOKE if not a.startswith(("train.steps=", "train.val_every="))), f"train.val_every={steps}",
            "--only", "seed=seed0", "--only", f"{name}={label}"]


@pytest.mark.parametrize("result, grid, before", _embedded_grid_commands())
def test_a_recorded_grid_runs_at_smoke_size_and_records(result, grid, before, tmp_path):
    """The command that reproduces a recorded grid result runs end to end (seed 0, one step or its
    cheapest cell) and writes a record of the same shape. Commands before it (making its inputs)
    run first, in a folder of their own that sees the repository's configs as `configs/`."""
    into, cwd = tmp_path / result, ROOT
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    if before:
        cwd = tmp_path / "work"
        cwd.mkdir()
        (cwd / "configs").symlink_to(ROOT / "configs")
        for part in before:
            made = subprocess.run([sys.executable, "-m", "rolecall", *part.split()[1:]], cwd=cwd, capture_output=True,
                                  text=True, timeout=300, env=env)
            assert made.returncode == 0, part + made.stdout[-2000:] + made.stderr[-2000:]
    done = subprocess.run([sys.executable, "-m", "rolecall", "grid", grid, "--out", str(tmp_path / "grid"),
                           "--record", str(into), *_smoke_args(grid)], cwd=cwd, capture_output=True, text=True,
                          timeout=900, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    doc, recorded = json.loads(into.read_text()), json.loads((ROOT / "benchmarks" / "results" / result).read_text())
    assert doc["what"] == recorded["what"] == "rolecall grid" and doc["axes"] == recorded["axes"]
    ran = [r for r in doc["runs"] if r["status"] == "done"]
    assert ran and all(r["labels"]["seed"] == "seed0" and len(r["curve"]) == 2 for r in ran), doc["runs"]
    assert doc["provenance"]["command"].startswith(f"rolecall grid {grid} ")
