"""One object per run that scores final answers in batches: math, code, QA or a user's function.

The trainer sees only `score_many(completions, problems) -> list[Score]`; which gold field a
verifier reads (`answer`, `meta["answers"]`, `meta["tests"]`) is its own business.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

from rolecall.rewards.base import Score
from rolecall.rewards.code import CodeSandbox, SandboxLimits, extract_code
from rolecall.rewards.custom import CustomVerifier
from rolecall.rewards.math import grade_math
from rolecall.rewards.math_judge import MathJudge
from rolecall.rewards.qa import gold_answers, grade_qa
from rolecall.types import Problem


class Verifier(Protocol):
    name: str

    def score_many(self, completions: list[str], problems: list[Problem]) -> list[Score]: ...

    def close(self) -> None: ...


@dataclass
class MathVerifier:
    format_penalty: float = 0.0
    checker: str = "math_verify"
    deadline_s: float = 5.0
    name: str = "math"
    _judge: MathJudge | None = field(default=None, repr=False)

    def score_many(self, completions: list[str], problems: list[Problem]) -> list[Score]:
        if self._judge is None and self.checker == "math_verify":
            self._judge = MathJudge(self.deadline_s)
        return [grade_math(c, p.answer, missing_box_penalty=self.format_penalty, checker=self.checker,
                           judge=self._judge) for c, p in zip(completions, problems, strict=True)]

    def close(self) -> None:
        if self._judge is not None:
            self._judge.close()


@dataclass
class QAVerifier:
    metric: str = "em"
    format_penalty: float = 0.0
    name: str = "qa"

    def score_many(self, completions: list[str], problems: list[Problem]) -> list[Score]:
        return [grade_qa(c, gold_answers(p.meta, p.answer), metric=self.metric,
                         missing_answer_penalty=self.format_penalty)
                for c, p in zip(completions, problems, strict=True)]

    def close(self) -> None:
        pass


class CodeVerifier:
    """Runs the last fenced code block of each completion against the problem's hidden tests."""

    name = "code"

    def __init__(self, *, mode: str = "all_pass", format_penalty: float = 0.0, timeout_s: float = 6.0,
                 memory_mb: int = 1024, workers: int = 2, allow_unisolated: bool = False) -> None:
        if mode not in ("all_pass", "pass_rate"):
            raise ValueError(f"code mode: unknown {mode!r}; allowed: all_pass, pass_rate")
        self.mode, self.format_penalty = mode, format_penalty
        self.sandbox = CodeSandbox(SandboxLimits(timeout_s=timeout_s, memory_mb=memory_mb),
                                   max_workers=workers, allow_unisolated_network=allow_unisolated)

    def score_many(self, completions: list[str], problems: list[Problem]) -> list[Score]:
        out: list[Score | None] = [None] * len(completions)
        jobs, where = [], []
        for i, (c, p) in enumerate(zip(completions, problems, strict=True)):
            tests = p.meta.get("tests")
            code = extract_code(c)
            if tests is None:
                out[i] = Score(None, "unscorable", info={"reason": f"problem {p.uid} has no tests"})
            elif code is None:
                out[i] = Score(0.0 - self.format_penalty, "no_answer")
            else:
                jobs.append((code, tests))
                where.append(i)
        for i, s in zip(where, self.sandbox.run_many(jobs, mode=self.mode)):
            out[i] = s
        return out  # type: ignore[return-value]

    def close(self) -> None:
        close = getattr(self.sandbox, "close", None)
        if close:
            close()


def build_verifier(cfg) -> Verifier:
    """From a `RewardCfg` (duck-typed so rewards never import the config module)."""
    if cfg.name == "math":
        return MathVerifier(cfg.format_penalty, cfg.math_checker, cfg.math_deadline_s)
    if cfg.name == "qa":
        return QAVerifier(cfg.qa_metric, cfg.format_penalty)
    if cfg.name == "code":
        return CodeVerifier(mode=cfg.code_mode, format_penalty=cfg.format_penalty, timeout_s=cfg.code_timeout_s,
                            memory_mb=cfg.code_memory_mb, workers=cfg.code_workers,
                            allow_unisolated=cfg.allow_unisolated_code)
    if ":" in cfg.name:
        return CustomVerifier(cfg.name, getattr(cfg, "custom_deadline_s", 10.0))
    raise ValueError(f"reward.name: unknown {cfg.name!r}; allowed: math, code, qa or package.module:function")


def as_check(verifier: Verifier):
    """`team.check` for a rollout: the verifier's values now, None where unscorable or non-finite."""
    def check(texts, problems) -> list[float | None]:
        return [None if s.value is None or not math.isfinite(s.value) else s.value
                for s in verifier.score_many(list(texts), list(problems))]
    return check
