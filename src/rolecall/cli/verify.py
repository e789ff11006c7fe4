"""`rolecall verify`: score one completion with a verifier (`verify_app`, added to the root app)."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from rolecall.cli.common import check_number, fail, load_config_or_fail


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


_ANSWER_FROM_HELP = ("Where the final answer is read: boxed (the last \\boxed{}), boxed_or_last_number or "
                     "boxed_or_last_line (the same, else the last number or line when the text has no box).")


def _check_answer_from(answer_from: str) -> None:
    from rolecall.parsing import ANSWER_FROM

    if answer_from not in ANSWER_FROM:
        fail(f"--answer-from: unknown {answer_from!r}; allowed: {', '.join(ANSWER_FROM)}")


@verify_app.command("math")
def verify_math(
    gold: str = typer.Option(..., "--gold", help="The gold answer."),
    completion: str = typer.Option(..., "--completion", help="A file holding the completion, or - for stdin."),
    format_penalty: float = typer.Option(0.0, "--format-penalty", "--missing-box-penalty",
                                         help="Score of a completion without \\boxed{} is minus this."),
    checker: str = typer.Option("math_verify", help="math_verify (symbolic, in a killable worker) or strict."),
    deadline: float = typer.Option(5.0, help="Seconds one symbolic comparison may take; an answer that overruns it "
                                    "scores 0 (status pathological)."),
    answer_from: str = typer.Option("boxed", "--answer-from", help=_ANSWER_FROM_HELP),
) -> None:
    """Grade a completion's last \\boxed{} (or the --answer-from fallback) against the gold answer (the trainer's
    math reward)."""
    # imported here: keeps rolecall --help and config checks from loading torch
    from rolecall.rewards.math import CHECKERS, grade_math
    from rolecall.rewards.math_judge import MathJudge

    if checker not in CHECKERS:
        fail(f"--checker: unknown {checker!r}; allowed: {', '.join(CHECKERS)}")
    check_number("--deadline", deadline, above=0)
    check_number("--format-penalty", format_penalty, at_least=0)
    _check_answer_from(answer_from)
    text = _read_completion(completion)
    judge = MathJudge(deadline) if checker == "math_verify" else None
    try:
        s = grade_math(text, gold, missing_box_penalty=format_penalty, checker=checker, judge=judge,
                       answer_from=answer_from)
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
    check_number("--timeout", timeout, above=0)
    check_number("--memory-mb", memory_mb, above=0)
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
    answer_from: str = typer.Option("boxed", "--answer-from", help=_ANSWER_FROM_HELP),
) -> None:
    """Grade a completion's answer against gold answers (normalised EM / token F1; the trainer's qa reward)."""
    from rolecall.rewards.qa import METRICS, grade_qa

    if metric not in METRICS:
        fail(f"--metric: unknown {metric!r}; allowed: {', '.join(METRICS)}")
    _check_answer_from(answer_from)
    s = grade_qa(_read_completion(completion), gold, metric=metric, answer_from=answer_from)
    _emit({**s.to_json(), "gold": gold})


@verify_app.command("reasoning_gym")
def verify_reasoning_gym(
    completion: str = typer.Option(..., "--completion", help="A file holding the completion, or - for stdin."),
    config: Optional[Path] = typer.Option(None, "--config", help="A run's config (or config.yaml in a run directory): "
                                          "its task.gym, task.gym_options, validation seed (task.seed) and reward "
                                          "settings are the defaults of the options below."),
    problem: Optional[str] = typer.Option(None, "--problem", help="A problem's uid as a run logs it, GYM/SEED/INDEX "
                                          "(e.g. chain_sum/1234/7): sets --gym, --seed and --index."),
    gym: Optional[str] = typer.Option(None, "--gym", help="The reasoning-gym dataset, e.g. chain_sum."),
    options: Optional[str] = typer.Option(None, "--options", help="The dataset's options as JSON (task.gym_options)."),
    seed: Optional[int] = typer.Option(None, "--seed", help="The dataset seed (default: the config's task.seed, else 1234)."),
    index: Optional[int] = typer.Option(None, "--index", help="Which item of that dataset (default 0)."),
    answer_from: Optional[str] = typer.Option(None, "--answer-from", help=_ANSWER_FROM_HELP + " Default: the config's, "
                                              "else boxed."),
    format_penalty: Optional[float] = typer.Option(None, "--format-penalty", help="Score of a completion with no answer "
                                                   "is minus this (default: the config's, else 0)."),
    deadline: Optional[float] = typer.Option(None, help="Seconds score_answer may take (default: the config's "
                                             "reward.gym_deadline_s, else 5)."),
) -> None:
    """Score a completion on one reasoning-gym problem with the dataset's own score_answer (the trainer's
    reasoning_gym reward): the problem is regenerated from its dataset, options, seed and index."""
    from rolecall.tasks.reasoning_gym import make_entries, make_problem

    task = reward = None
    if config is not None:
        task, reward = _task_and_reward(config)
        if task.name != "reasoning_gym":
            fail(f"--config {str(config)!r}: task.name is {task.name!r}, not reasoning_gym")
    if problem is not None:
        parts = problem.rsplit("/", 2)
        if len(parts) != 3 or not parts[1].lstrip("-").isdigit() or not parts[2].isdigit():
            fail(f"--problem {problem!r}: expected GYM/SEED/INDEX, e.g. chain_sum/1234/7")
        gym, seed, index = parts[0], int(parts[1]), int(parts[2])
    gym = gym or (task.gym if task else None)
    if not gym:
        fail("name the problem: --gym (with --seed and --index), --problem GYM/SEED/INDEX, or --config")
    try:
        opts = json.loads(options) if options is not None else dict(task.gym_options) if task else {}
    except json.JSONDecodeError as e:
        fail(f"--options: not JSON ({e})")
    if not isinstance(opts, dict):
        fail(f"--options: expected a JSON object, got {options!r}")
    seed = seed if seed is not None else task.seed if task else 1234
    index = index if index is not None else 0
    answer_from = answer_from or (reward.answer_from if reward else "boxed")
    format_penalty = format_penalty if format_penalty is not None else reward.format_penalty if reward else 0.0
    deadline = deadline if deadline is not None else reward.gym_deadline_s if reward else 5.0
    _check_answer_from(answer_from)
    check_number("--index", index, at_least=0)
    check_number("--format-penalty", format_penalty, at_least=0)
    check_number("--deadline", deadline, above=0)
    try:  # the problem exactly as the task makes it, JSON round trip and checks included
        p = make_problem(gym, opts, seed, index, make_entries(gym, opts, seed, index + 1, "requested")[index])
    except ValueError as e:  # unknown dataset, refused options, no reasoning-gym installed
        fail(str(e).replace("task.gym_options", "--options").replace("task.gym", "--gym"))
    text = _read_completion(completion)
    from rolecall.rewards.verifiers.reasoning_gym import ReasoningGymVerifier

    v = ReasoningGymVerifier(answer_from=answer_from, format_penalty=format_penalty, deadline_s=deadline)
    try:
        s = v.score(text, p)
    finally:
        v.close()
    _emit({**s.to_json(), "gold": p.meta["entry"].get("answer"), "problem": p.uid, "question": p.prompt})


def _task_and_reward(config: Path):
    """The config's task and reward sections; a run directory's config.yaml is read as it is."""
    path = config / "config.yaml" if config.is_dir() else config
    if not path.is_file():
        fail(f"--config {str(config)!r}: no such file")
    cfg = load_config_or_fail(path, [], what=f"--config {str(config)!r}: ")
    return cfg.task, cfg.reward
