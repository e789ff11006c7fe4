"""Scoring: each episode's final answer and every text its workflow queued for grading, by the run's verifier.

A NaN or Inf from a verifier never reaches the estimator as a number: the episode becomes
unscorable with status `nonfinite` (see `score`). So does a finite value beyond ±`MAX_REWARD`,
which would overflow the statistics (a sum of two 1e308 is inf).
"""
from __future__ import annotations

import math
from collections import defaultdict

from rolecall.rewards.verifier import Verifier
from rolecall.types import NONFINITE, Episode, Problem

MAX_REWARD = 1e12  # |reward| beyond this is treated as non-finite: sums and variances of rewards stay finite


def score(episodes: list[Episode], verifier: Verifier) -> dict[str, float]:
    """Grade each episode's final answer and every text its workflow queued with `Team.grade`
    (rewards in `Episode.graded_rewards[name]`); `reward=None` = unscorable.

    Identical (problem, text) pairs are graded once: a final answer is often one of the
    graded texts, and a sandboxed code run is worth not repeating. A NaN/Inf reward, or one
    beyond ±MAX_REWARD (a broken verifier), never reaches the estimator as a number: the episode gets
    reward None and status `nonfinite`, so it leaves the group statistics (A = 0) and is
    counted apart from `unscorable`; the raw value is kept in `Episode.nonfinite_reward`.
    """
    # A reward function that reads the episode scores each final answer with its own episode.
    per_episode = bool(getattr(verifier, "wants_episode", False))
    wanted: dict[tuple[str, str], Problem] = {}
    for ep in episodes:
        finals = [] if per_episode else [ep.final_answer]
        for text in [*finals, *(t for texts in ep.graded.values() for t in texts)]:
            wanted.setdefault((ep.problem.uid, text), ep.problem)
    keys = list(wanted)
    graded = dict(zip(keys, verifier.score_many([t for _, t in keys], [wanted[k] for k in keys])))
    if per_episode:
        finals_s = verifier.score_many([ep.final_answer for ep in episodes], [ep.problem for ep in episodes],
                                       episodes=episodes)
    else:
        finals_s = [graded[(ep.problem.uid, ep.final_answer)] for ep in episodes]
    for ep, s in zip(episodes, finals_s, strict=True):
        ep.reward, ep.status = s.value, s.status
        if unusable(s.value):
            ep.reward, ep.status, ep.nonfinite_reward = None, NONFINITE, repr(s.value)
        if s.info:  # why the verifier decided so (failed test, judge overrun), for samples.jsonl
            ep.verdict = dict(s.info)
        rewards = {name: [None if unusable(v := graded[(ep.problem.uid, t)].value) else v for t in texts]
                    for name, texts in ep.graded.items()}
        if rewards:
            ep.graded_rewards = rewards
    return status_shares(episodes)


def status_shares(episodes: list[Episode]) -> dict[str, float]:
    """`reward/status_<verdict>`: the share of scored episodes with each verdict."""
    status: dict[str, int] = defaultdict(int)
    for ep in episodes:
        status[ep.status] += 1
    n = max(1, len(episodes))
    return {f"reward/status_{k}": v / n for k, v in status.items()}


def nonfinite(value: float | None) -> bool:
    """NaN or +-Inf; None (unscorable) is a missing value, not a non-finite one."""
    return value is not None and not math.isfinite(value)


def unusable(value: float | None) -> bool:
    """Non-finite, or so large that the statistics would overflow: left out like NaN."""
    return value is not None and (not math.isfinite(value) or abs(value) > MAX_REWARD)
