"""The pure stages between rollout and update: score episodes, compute per-turn advantages."""
from __future__ import annotations

from collections import defaultdict

from rolecall.advantages import get_estimator
from rolecall.rewards import grade_math
from rolecall.types import Episode, Turn


def score(episodes: list[Episode], missing_box_penalty: float = 0.0) -> dict[str, float]:
    """Grade each episode's final answer; `reward=None` marks an unscorable episode."""
    status: dict[str, int] = defaultdict(int)
    for ep in episodes:
        s = grade_math(ep.final_answer, ep.problem.answer, missing_box_penalty=missing_box_penalty)
        ep.reward, ep.info["status"] = s.value, s.status
        status[s.status] += 1
    n = max(1, len(episodes))
    return {f"reward/status_{k}": v / n for k, v in status.items()}


def flatten(episodes: list[Episode]) -> tuple[list[Turn], list[Episode]]:
    """Every turn with the episode it came from (same order: episode-major, call order)."""
    turns, owners = [], []
    for ep in episodes:
        for t in ep.turns:
            turns.append(t)
            owners.append(ep)
    return turns, owners


def group_id(ep: Episode, turn: Turn, group_by: str) -> tuple:
    """Explicit GRPO group key: the problem plus the slot, role or nothing (whole episode)."""
    if group_by == "slot":
        return (ep.problem.uid, turn.slot)
    if group_by == "role":
        return (ep.problem.uid, turn.role)
    if group_by == "episode":
        return (ep.problem.uid,)
    raise ValueError(f"algo.group_by: unknown {group_by!r}; allowed: slot, role, episode")


def advantages(episodes: list[Episode], estimator: str, group_by: str | None) -> tuple[list[Turn], list[float], dict]:
    """Outcome reward broadcast to every turn (paper default), normalised within groups."""
    est = get_estimator(estimator)
    turns, owners = flatten(episodes)
    key = group_by or est.default_group_by
    rewards_N = [ep.reward for ep in owners]
    groups_N = [group_id(ep, t, key) for t, ep in zip(turns, owners)]
    adv_N, metrics = est.compute(rewards_N, groups_N)
    return turns, adv_N, {f"adv/{k}": v for k, v in metrics.items()}
