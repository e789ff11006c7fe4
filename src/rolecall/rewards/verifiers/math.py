"""`reward.name=math`: the final answer's last \\boxed{} (or the `reward.answer_from` fallback)
against the gold answer (exact or rational match, or math-verify's equivalence in a killable worker)."""
from __future__ import annotations

from dataclasses import dataclass, field

from rolecall.rewards.base import Score, VerifierSpec
from rolecall.rewards.math import grade_math
from rolecall.rewards.math_judge import MathJudge
from rolecall.types import Problem


@dataclass
class MathVerifier:
    format_penalty: float = 0.0
    checker: str = "math_verify"
    deadline_s: float = 5.0
    name: str = "math"
    answer_from: str = "boxed"
    _judge: MathJudge | None = field(default=None, repr=False)

    def score_many(self, completions: list[str], problems: list[Problem]) -> list[Score]:
        if self._judge is None and self.checker == "math_verify":
            self._judge = MathJudge(self.deadline_s)
        return [grade_math(c, p.answer, missing_box_penalty=self.format_penalty, checker=self.checker,
                           judge=self._judge, answer_from=self.answer_from) for c, p in zip(completions, problems, strict=True)]

    def close(self) -> None:
        if self._judge is not None:
            self._judge.close()


VERIFIER = VerifierSpec("math", lambda cfg: MathVerifier(cfg.format_penalty, cfg.math_checker, cfg.math_deadline_s,
                                                         answer_from=cfg.answer_from), reads_answer_from=True)
