"""Grade a completion: extract its program and run it in a sandbox (a shared default one unless
the caller passes its own).

The comparison of outputs with expected outputs lives in `verdicts.py`; its public names are
re-exported here (`verdict`, `judge_record`, `compare_stdout`, `json_matches`, `MODES`,
`FLOAT_TOLERANCE`) so that `rolecall.rewards.code.grade` keeps offering them.
"""
from __future__ import annotations

import threading

from rolecall.rewards.base import Score
from rolecall.rewards.code.extract import extract_code
from rolecall.rewards.code.verdicts import FLOAT_TOLERANCE, MODES, compare_stdout, json_matches, judge_record, verdict
from rolecall.rewards.code.sandbox import CodeSandbox
from rolecall.rewards.code.spec import CodeTests

__all__ = ["FLOAT_TOLERANCE", "MODES", "compare_stdout", "default_sandbox", "grade_code", "json_matches",
           "judge_record", "verdict"]


def grade_code(completion: str, tests: CodeTests, *, mode: str = "all_pass",
               sandbox: CodeSandbox | None = None) -> Score:
    """Run the last ```python block of `completion` against `tests`.

    all_pass: 1.0 only if every test passes; pass_rate: passed / total (tests that never ran
    count as failed). No code block scores 0 with `no_answer`; a sandbox failure is
    `unscorable` (value None), never 0.
    """
    if mode not in MODES:
        raise ValueError(f"mode: unknown {mode!r}; allowed: {list(MODES)}")
    code = extract_code(completion)
    if code is None or not code.strip():
        return Score(0.0, "no_answer", None, info={"passed": 0, "total": len(tests.inputs), "executed": 0,
                                                   "reason": "no closed ```python code block"})
    return (sandbox or default_sandbox()).run(code, tests, mode=mode)


_default: CodeSandbox | None = None
_default_lock = threading.Lock()


def default_sandbox() -> CodeSandbox:
    """One shared `CodeSandbox()` (default limits, isolation required), created on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = CodeSandbox()
        return _default
