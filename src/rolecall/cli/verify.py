"""`rolecall verify`: score one completion with a verifier (`verify_app`, added to the root app)."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from rolecall.cli.common import fail


verify_app = typer.Typer(no_args_is_help=True, help="Score one completion with a verifier; prints one JSON object.")


def _read_completion(completion: str) -> str:
    if completion == "-":
        return sys.stdin.read()
    p = Path(completion)
    if not p.is_file():
        fail(f"--completion {completion!r}: no such file")
    return p.read_text("utf-8", errors="replace")


def _emit(payload: dict) -> None:
    sys.stdout.write(json.dumps(payload) + "\n")


@verify_app.command("math")
def verify_math(
    gold: str = typer.Option(..., "--gold", help="The gold answer."),
    completion: str = typer.Option(..., "--completion", help="A file holding the completion, or - for stdin."),
    format_penalty: float = typer.Option(0.0, "--format-penalty", "--missing-box-penalty",
                                         help="Score of a completion without \\boxed{} is minus this."),
    checker: str = typer.Option("math_verify", help="math_verify (symbolic, in a killable worker) or strict."),
    deadline: float = typer.Option(5.0, help="Seconds one symbolic comparison may take; an answer that overruns it "
                                    "scores 0 (status pathological)."),
) -> None:
    """Grade a completion's last \\boxed{} against the gold answer (the trainer's math reward)."""
    # imported here: keeps rolecall --help and config checks from loading torch
    from rolecall.rewards.math import CHECKERS, grade_math
    from rolecall.rewards.math_judge import MathJudge

    if checker not in CHECKERS:
        fail(f"--checker: unknown {checker!r}; allowed: {', '.join(CHECKERS)}")
    if deadline <= 0:
        fail(f"--deadline must be > 0, got {deadline}")
    text = _read_completion(completion)
    judge = MathJudge(deadline) if checker == "math_verify" else None
    try:
        s = grade_math(text, gold, missing_box_penalty=format_penalty, checker=checker, judge=judge)
    finally:
        if judge is not None:
            judge.close()
    _emit({**s.to_json(), "gold": gold})


@verify_app.command("code")
def verify_code(
    tests: Path = typer.Option(..., "--tests", help="Hidden tests as JSON (DeepCoder list or {inputs, outputs, fn_name})."),
    completion: str = typer.Option(..., "--completion", help="A file holding the completion, or - for stdin."),
    fn_name: Optional[str] = typer.Option(None, "--fn-name", help="Function to call for functional tests (metadata.func_name)."),
    mode: str = typer.Option("all_pass", help="all_pass (paper) or pass_rate."),
    timeout: float = typer.Option(6.0, help="Wall seconds per test."),
    memory_mb: int = typer.Option(1024, "--memory-mb", help="Address-space limit of the program."),
    allow_unisolated: bool = typer.Option(False, "--allow-unisolated", help="Run even where no network namespace can be made."),
) -> None:
    """Run the completion's last fenced code block against hidden tests in the sandbox."""
    from rolecall.rewards.code import TestSpecError, parse_tests
    from rolecall.rewards.verifier import CodeVerifier
    from rolecall.types import Problem

    if mode not in ("all_pass", "pass_rate"):
        fail(f"--mode: unknown {mode!r}; allowed: all_pass, pass_rate")
    if timeout <= 0 or memory_mb <= 0:
        fail("--timeout and --memory-mb must be > 0")
    if not tests.is_file():
        fail(f"--tests {str(tests)!r}: no such file")
    try:
        spec = parse_tests(tests.read_text("utf-8"), fn_name=fn_name)
    except (TestSpecError, UnicodeDecodeError) as e:
        fail(f"--tests {str(tests)!r}: {e}")
    text = _read_completion(completion)
    try:
        v = CodeVerifier(mode=mode, timeout_s=timeout, memory_mb=memory_mb, workers=1,
                         allow_unisolated=allow_unisolated)
    except RuntimeError as e:
        fail(str(e))
    try:
        s = v.score_many([text], [Problem(uid="cli", prompt="", answer="", meta={"tests": spec})])[0]
    finally:
        v.close()
    _emit(s.to_json())


@verify_app.command("qa")
def verify_qa(
    gold: list[str] = typer.Option(..., "--gold", help="A gold answer; repeat for several."),
    completion: str = typer.Option(..., "--completion", help="A file holding the completion, or - for stdin."),
    metric: str = typer.Option("em", help="em (normalised exact match) or f1."),
) -> None:
    """Grade a completion's answer against gold answers (normalised EM / token F1)."""
    from rolecall.rewards.qa import METRICS, grade_qa

    if metric not in METRICS:
        fail(f"--metric: unknown {metric!r}; allowed: {', '.join(METRICS)}")
    s = grade_qa(_read_completion(completion), gold, metric=metric)
    _emit({**s.to_json(), "gold": gold})
