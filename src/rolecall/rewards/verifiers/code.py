"""`reward.name=code`: the last fenced code block of each completion, run against the problem's
hidden tests in the sandbox."""
from __future__ import annotations

from rolecall.rewards.base import Score, VerifierSpec
from rolecall.rewards.code import CodeSandbox, SandboxLimits, extract_code
from rolecall.types import Problem


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


VERIFIER = VerifierSpec("code", lambda cfg: CodeVerifier(
    mode=cfg.code_mode, format_penalty=cfg.format_penalty, timeout_s=cfg.code_timeout_s, memory_mb=cfg.code_memory_mb,
    workers=cfg.code_workers, allow_unisolated=cfg.allow_unisolated_code))
