"""Code verdicts, computed in the trusted parent from a run's raw outputs (never in the child).

Comparison is strict. stdin tests: the lists of lines must be equal after stripping trailing
whitespace from each line and dropping trailing empty lines (a prefix, extra lines or no output
all fail). Functional tests: the JSON return value must equal the expected value with exact
types (True is not 1, "1" is not 1, a tuple arrives as a list); int and float compare
numerically with a 1e-9 relative/absolute tolerance once either side is a float. TACO/APPS
quirk: an expected one-element list also accepts its only element.

Separate from `sandbox.py` (which runs programs and calls `verdict`/`judge_record` on what
they produced) and from `grade.py` (which owns the shared default sandbox): both import it,
and it imports neither. `grade.py` re-exports its public names.
"""
from __future__ import annotations

import json
import math
from typing import Any

from rolecall.rewards.base import Score
from rolecall.rewards.code.channel import RunResult
from rolecall.rewards.code.spec import CodeTests

MODES = ("all_pass", "pass_rate")
FLOAT_TOLERANCE = 1e-9
# Worst first: a run's status is the worst among its failures.
_PRECEDENCE = ("memory_limit", "timeout", "output_limit", "runtime_error", "wrong")
_END_STATUS = {"memory": "memory_limit", "timeout": "timeout", "output": "output_limit",
               "error": "runtime_error", "exit": "runtime_error", "died": "runtime_error"}
_SNIPPET = 40


def verdict(result: RunResult, tests: CodeTests, *, mode: str = "all_pass", code: str | None = None,
            isolation: dict | None = None) -> Score:
    """Turn a run's raw records into a Score; see the module docstring for the comparison."""
    n = len(tests.inputs)
    isolation = isolation or {}
    info: dict[str, Any] = {"passed": 0, "total": n, "executed": len(result.records),
                            "network": isolation.get("network"), "isolation": isolation.get("strategy"),
                            "sandbox_uid": result.sandbox_uid, "elapsed_s": round(result.elapsed_s, 3)}
    if result.infra_error or not result.ready:
        info["reason"] = result.infra_error or "the sandbox never became ready"
        return Score(None, "unscorable", code, info)
    failures = []
    for record in result.records:
        status, reason = record.get("_judged") or judge_record(record, tests)
        if status == "ok":
            info["passed"] += 1
        else:
            failures.append((status, record["i"], reason))
    executed = len(result.records)
    if result.killed == "deadline":
        failures.append(("timeout", executed, "the run overran its deadline"))
    elif result.killed != "early_stop" and not result.finished:
        failures.append(("runtime_error", executed, "the harness did not finish (the program ended it early"
                         f" or killed it; server {result.server_exit or 'gone'})"))
    elif not failures and executed != n:
        failures.append(("runtime_error", executed, "not every test ran"))
    status = min((f[0] for f in failures), key=_PRECEDENCE.index) if failures else "ok"
    if failures:
        first = min(failures, key=lambda f: f[1])
        info["first_failure"] = {"test": first[1], "status": first[0], "reason": first[2]}
    value = info["passed"] / n if mode == "pass_rate" else float(status == "ok")
    return Score(value, status, code, info)


def judge_record(record: dict, tests: CodeTests) -> tuple[str, str]:
    """(status, short reason) of one executed test; status "ok" when it passed."""
    end = record.get("end")
    if end != "ok":
        return _END_STATUS.get(end, "runtime_error"), _snip(record.get("detail") or str(end), 200)
    i = record["i"]
    if tests.kind == "stdin":
        return compare_stdout(record.get("out", ""), tests.outputs[i])
    try:
        got = json.loads(record.get("ret", ""))
    except (ValueError, RecursionError):
        return "runtime_error", "unreadable return value"
    if json_matches(got, tests.outputs[i]):
        return "ok", ""
    return "wrong", f"returned {_snip(json.dumps(got))}, expected {_snip(json.dumps(tests.outputs[i]))}"


def _lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def compare_stdout(got: str, expected: str) -> tuple[str, str]:
    """("ok", "") when the lines match (trailing spaces, CRLF and trailing blank lines ignored),
    else ("wrong", where they first differ)."""
    g, e = _lines(got), _lines(expected)
    if g == e:
        return "ok", ""
    if not g:
        return "wrong", "no output"
    k = next((k for k, (a, b) in enumerate(zip(g, e)) if a != b), min(len(g), len(e)))
    show = lambda lines: repr(_snip(lines[k])) if k < len(lines) else "<end of output>"  # noqa: E731
    return "wrong", f"line {k + 1}: got {show(g)}, expected {show(e)}"


def json_matches(got: Any, expected: Any) -> bool:
    """Exact JSON equality (see module docstring), plus the one-element-list quirk."""
    if _equal(got, expected):
        return True
    return type(expected) is list and len(expected) == 1 and _equal(got, expected[0])


def _equal(a: Any, b: Any) -> bool:
    ta, tb = type(a), type(b)
    if ta is bool or tb is bool:
        return ta is tb and a == b
    if ta in (int, float) and tb in (int, float):
        if ta is int and tb is int:
            return a == b
        try:
            return math.isclose(a, b, rel_tol=FLOAT_TOLERANCE, abs_tol=FLOAT_TOLERANCE)
        except OverflowError:      # an int too large for a float
            return False
    if ta is not tb:
        return False
    if ta is list:
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if ta is dict:
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return a == b


def _snip(text: str, limit: int = _SNIPPET) -> str:
    """Enough to debug a reward, never a whole expected output."""
    return text if len(text) <= limit else text[: limit - 3] + "..."
