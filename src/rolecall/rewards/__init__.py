"""Verifiers that turn a workflow's final text into a scalar reward."""
from __future__ import annotations

from rolecall.rewards.base import Score
from rolecall.rewards.math import answers_match, grade_math

__all__ = ["Score", "answers_match", "grade_math"]
