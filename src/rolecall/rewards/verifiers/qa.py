"""`reward.name=qa`: normalised exact match or best token F1 against the gold answers (the
answer taken as `reward.answer_from` says)."""
from __future__ import annotations

from dataclasses import dataclass

from rolecall.rewards.base import Score, VerifierSpec
from rolecall.rewards.qa import gold_answers, grade_qa
from rolecall.types import Problem


@dataclass
class QAVerifier:
    metric: str = "em"
    format_penalty: float = 0.0
    answer_from: str = "boxed"
    name: str = "qa"

    def score_many(self, completions: list[str], problems: list[Problem]) -> list[Score]:
        return [grade_qa(c, gold_answers(p.meta, p.answer), metric=self.metric,
                         missing_answer_penalty=self.format_penalty, answer_from=self.answer_from)
                for c, p in zip(completions, problems, strict=True)]

    def close(self) -> None:
        pass


VERIFIER = VerifierSpec("qa", lambda cfg: QAVerifier(cfg.qa_metric, cfg.format_penalty, cfg.answer_from),
                        reads_answer_from=True)
