"""The pure stages between rollout and update: score episodes, compute per-turn advantages."""
from __future__ import annotations

import math
from collections import defaultdict

from rolecall.advantages import get_estimator
from rolecall.rewards.verifier import Verifier
from rolecall.types import Episode, Problem, Turn


NONFINITE = "nonfinite"  # status of an episode whose verifier returned NaN or Inf


def score(episodes: list[Episode], verifier: Verifier) -> dict[str, float]:
    """Grade each episode's final answer and every text its workflow queued with `Team.grade`
    (rewards in `info["graded_rewards"][name]`); `reward=None` = unscorable.

    Identical (problem, text) pairs are graded once: a final answer is often one of the
    graded texts, and a sandboxed code run is worth not repeating. A NaN/Inf reward
    (a broken user verifier) never reaches the estimator as a number: the episode gets
    reward None and status `nonfinite`, so it leaves the group statistics (A = 0) and is
    counted apart from `unscorable`; the raw value is kept in `info["nonfinite_reward"]`.
    """
    # A reward function that reads the episode scores each final answer with its own episode.
    per_episode = bool(getattr(verifier, "wants_episode", False))
    wanted: dict[tuple[str, str], Problem] = {}
    for ep in episodes:
        finals = [] if per_episode else [ep.final_answer]
        for text in [*finals, *(t for texts in ep.info.get("graded", {}).values() for t in texts)]:
            wanted.setdefault((ep.problem.uid, text), ep.problem)
    keys = list(wanted)
    graded = dict(zip(keys, verifier.score_many([t for _, t in keys], [wanted[k] for k in keys])))
    if per_episode:
        finals_s = verifier.score_many([ep.final_answer for ep in episodes], [ep.problem for ep in episodes],
                                       episodes=episodes)
    else:
        finals_s = [graded[(ep.problem.uid, ep.final_answer)] for ep in episodes]
    for ep, s in zip(episodes, finals_s, strict=True):
        ep.reward, ep.info["status"] = s.value, s.status
        if _nonfinite(s.value):
            ep.reward, ep.info["status"], ep.info["nonfinite_reward"] = None, NONFINITE, repr(s.value)
        if s.info:  # why the verifier decided so (failed test, judge overrun), for samples.jsonl
            ep.info["verdict"] = dict(s.info)
        rewards = {name: [None if _nonfinite(v := graded[(ep.problem.uid, t)].value) else v for t in texts]
                    for name, texts in ep.info.get("graded", {}).items()}
        if rewards:
            ep.info["graded_rewards"] = rewards
    return status_shares(episodes)


def status_shares(episodes: list[Episode]) -> dict[str, float]:
    """`reward/status_<verdict>`: the share of scored episodes with each verdict."""
    status: dict[str, int] = defaultdict(int)
    for ep in episodes:
        status[ep.info["status"]] += 1
    n = max(1, len(episodes))
    return {f"reward/status_{k}": v / n for k, v in status.items()}


def checker(verifier: Verifier):
    """`team.check` for a rollout: the verifier's values now, None where unscorable or non-finite."""
    def check(texts, problems) -> list[float | None]:
        return [None if s.value is None or _nonfinite(s.value) else s.value
                for s in verifier.score_many(list(texts), list(problems))]
    return check


def _nonfinite(value: float | None) -> bool:
    """NaN or +-Inf; None (unscorable) is a missing value, not a non-finite one."""
    return value is not None and not math.isfinite(value)


def flatten(episodes: list[Episode]) -> tuple[list[Turn], list[Episode]]:
    """Every turn with the episode it came from (same order: episode-major, call order)."""
    turns, owners = [], []
    for ep in episodes:
        for t in ep.turns:
            turns.append(t)
            owners.append(ep)
    return turns, owners


def group_id(ep: Episode, turn: Turn, group_by: str) -> tuple:
    """Explicit GRPO group key: the drawn problem plus the slot, role or nothing (whole episode).

    The draw (`Episode.group`), not the problem's uid: at an epoch boundary one step can draw
    the same problem twice, and its two groups of G must stay two groups, not one of 2G.
    """
    key = (ep.group, ep.problem.uid)
    if group_by == "slot":
        return (*key, turn.slot)
    if group_by == "role":
        return (*key, turn.role)
    if group_by == "turn":
        return (*key, turn.index, turn.role)
    if group_by == "episode":
        return key
    raise ValueError(f"algo.group_by: unknown {group_by!r}; allowed: slot, role, turn, episode")


def advantages(episodes: list[Episode], estimator: str, group_by: str | None,
               options: dict | None = None) -> tuple[list[Turn], list[float], dict]:
    """Outcome reward broadcast to every turn (paper default), normalised within groups."""
    est = get_estimator(estimator, options)
    turns, owners = flatten(episodes)
    key = group_by or est.default_group_by
    # A workflow may reward some turns on their own (`Workflow.turn_rewards`); the rest get the outcome.
    rewards_N = [ep.info["turn_rewards"].get(t.index, ep.reward) if ep.info.get("turn_rewards") else ep.reward
                 for t, ep in zip(turns, owners)]
    groups_N = [group_id(ep, t, key) for t, ep in zip(turns, owners)]
    adv_N, metrics = est.compute(rewards_N, groups_N)
    return turns, adv_N, {f"adv/{k}": v for k, v in metrics.items()}


def credit(episodes: list[Episode], workflow) -> dict[str, float]:
    """After scoring: each turn's reward where the workflow set one, and its own metrics.

    In rising precedence: `team.reward(reply, value)`, `team.grade(reply, ..., reward=True)`
    (the turn gets its own grade), `workflow.turn_rewards(episode)`. Other turns keep the
    outcome. A non-finite value becomes None (unscorable: advantage 0, out of the statistics).
    """
    for ep in episodes:
        own: dict[int, float | None] = dict(ep.info.get("set_rewards", {}))
        for name, turns in ep.info.get("graded_turns", {}).items():
            own.update((t, r) for t, r in zip(turns, ep.grades(name)) if t is not None)
        own.update(workflow.turn_rewards(ep) or {})
        if own:
            ep.info["turn_rewards"] = {i: (None if v is None or _nonfinite(v) else float(v)) for i, v in own.items()}
    return workflow.metrics(episodes)
