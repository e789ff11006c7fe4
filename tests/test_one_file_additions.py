"""Adding a piece is one file: docs/architecture.md's examples of a task (with an option of its
own), a workflow and an estimator, added as files to a copy of the repository, are found there,
train together, and leave green the tests that read the registries (every test file that names
one, found by reading the tests, so a new such test is included without an entry here)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "architecture.md"
# What a test reads when it enumerates the shipped pieces (workflow_helpers: MATH_WORKFLOWS ...).
# The tests that read every module's code for rules (layers, sizes, names, citations): all of each.
SCANS = ("test_architecture.py", "test_self_contained.py", "test_config_strict.py", "test_install_extras.py")
REGISTRY_WORDS = re.compile(r"\b(WORKFLOWS|MATH_WORKFLOWS|ESTIMATORS|task_names|workflow_helpers)\b")


def doc_examples() -> dict[str, str]:
    """{repository path: source} of each ```python block in the doc whose first line names a file."""
    out = {}
    for indent, body in re.findall(r"^( *)```python\n(.*?)^\1```", DOC.read_text("utf-8"), re.S | re.M):
        code = textwrap.dedent(body)
        first = code.splitlines()[0]
        if first.startswith("# src/") and first.endswith(".py"):
            out[first[2:]] = code
    return out


def test_the_doc_shows_a_task_a_workflow_and_an_estimator():
    files = doc_examples()
    assert sorted(Path(f).parent.name for f in files) == ["advantages", "tasks", "workflows"], files
    for path, code in files.items():
        compile(code, path, "exec")  # each is a whole module as shown
        assert not (REPO / path).exists(), f"{path} is an example, not a shipped file"


def registry_tests() -> list[str]:
    """The tests (as pytest node ids) that a new file could break: every test of a file that reads
    the package's modules, and each test function that reads a registry (its code names one, a
    module-level name built from one, `CELLS = [... for wf in WORKFLOWS]`, or a helper that does)."""
    import ast

    ids = []
    for path in sorted((REPO / "tests").glob("test_*.py")):
        if path.name == Path(__file__).name:
            continue
        text = path.read_text("utf-8")
        if path.name in SCANS:
            ids.append(f"tests/{path.name}")
            continue
        tree = ast.parse(text)
        words = set(REGISTRY_WORDS.pattern[3:-3].split("|"))
        for node in tree.body:  # module-level names built from a registry
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and REGISTRY_WORDS.search(ast.get_source_segment(text, node)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                words |= {t.id for t in targets if isinstance(t, ast.Name)}
        functions = [n for n in tree.body if isinstance(n, ast.FunctionDef)]

        def reads(node: ast.FunctionDef) -> bool:
            start = min([d.lineno for d in node.decorator_list] + [node.lineno])
            code = "\n".join(text.splitlines()[start - 1:node.end_lineno])
            return re.search(r"\b(" + "|".join(sorted(words)) + r")\b", code) is not None

        for _ in range(3):  # helpers that read a registry, and helpers of those
            words |= {n.name for n in functions if not n.name.startswith("test_") and reads(n)}
        ids += [f"tests/{path.name}::{n.name}" for n in functions if n.name.startswith("test_") and reads(n)]
    return ids


CHECK = r'''
import json, sys
from pathlib import Path
from rolecall.advantages import ESTIMATORS
from rolecall.config import ConfigError, load_config
from rolecall.tasks import get_task, task_names
from rolecall.workflows import WORKFLOWS

assert "times_table" in task_names() and "second_opinion" in WORKFLOWS and "median_baseline" in ESTIMATORS
cfg = load_config(None, ["task.name=times_table", "task.options={largest: 9}", "task.n_val=10", "reward.name=math"])
train, val = get_task("times_table").problems(cfg, None, print)
assert (len(train), len(val)) == (54, 10), (len(train), len(val))
assert get_task("times_table").options_of(cfg).largest == 9
for bad, says in (("task.options={largest: nine}", "task.options.largest"),
                  ("task.options={largest: true}", "task.options.largest"),
                  ("task.options={smallest: 2}", "task.options.smallest: not an option of task 'times_table'"),
                  ("task.options={largest: 2}", "largest must be >= 3")):
    try:
        load_config(None, ["task.name=times_table", bad, "reward.name=math"])
    except ConfigError as e:
        assert says in str(e), (bad, str(e))
    else:
        raise AssertionError(f"{bad} was accepted")
try:
    load_config(None, ["task.options={largest: 9}"])
except ConfigError as e:
    assert "task 'arithmetic' declares no options of its own" in str(e), str(e)
else:
    raise AssertionError("an option of a task that has none was accepted")
print("checked")
'''


def test_a_task_a_workflow_and_an_estimator_added_as_one_file_each(tmp_path):
    scratch = tmp_path / "repo"
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info", ".pytest_cache")
    for part in ("src", "tests", "docs", "configs", "examples", "scripts", ".ci", "benchmarks"):
        if (REPO / part).is_symlink():  # configs/ is the package's configs folder
            (scratch / part).symlink_to(os.readlink(REPO / part))
        elif (REPO / part).exists():
            shutil.copytree(REPO / part, scratch / part, ignore=skip, symlinks=True)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, scratch / name)
    for path, code in doc_examples().items():
        (scratch / path).write_text(code, "utf-8")
    env = {**os.environ, "PYTHONPATH": str(scratch / "src"), "HF_HUB_OFFLINE": "1"}
    for git in (["init", "-q"], ["add", "-A"]):  # a repository, as a contributor's copy is (tests list its files)
        subprocess.run(["git", *git], cwd=scratch, check=True, capture_output=True)

    def run(*args, timeout=600):
        res = subprocess.run([sys.executable, *args], cwd=scratch, env=env, capture_output=True, text=True,
                             timeout=timeout)
        assert res.returncode == 0, (args, res.stdout[-4000:], res.stderr[-4000:])
        return res

    where = run("-c", "import rolecall; print(rolecall.__file__)").stdout.strip()
    assert where.startswith(str(scratch)), where  # the copy is what runs, not the installed checkout
    assert run("-c", CHECK).stdout.strip().endswith("checked")
    # The three together: the workflow on the task, credited by the estimator, one real update.
    out = tmp_path / "run"
    run("-m", "rolecall", "train", "task.name=times_table", "task.options={largest: 9}", "task.n_val=10",
        "reward.name=math", "workflow.name=second_opinion", "algo.estimator=median_baseline", "train.steps=1",
        "train.val_every=1", "rollout.problems_per_step=2", "rollout.group_size=2", "--out", str(out))
    assert (out / "metrics.jsonl").exists()
    # The tests that read the registries, with the three added.
    tests = registry_tests()
    assert "tests/test_workflow_declarations.py::test_every_estimator_trains_every_workflow" in tests, tests
    run("-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *tests, timeout=840)
