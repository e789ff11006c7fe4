"""Verifiers that turn a workflow's final text into a scalar reward."""
from __future__ import annotations

from rolecall.rewards.math import Score, answers_match, grade_math

__all__ = ["Score", "answers_match", "grade_math"]
