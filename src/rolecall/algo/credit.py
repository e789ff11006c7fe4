"""Credit: which reward each turn gets (the outcome, or the workflow's own per-turn reward) and its
advantage within its group (GRPO grouped by call slot, role, turn or episode)."""
from __future__ import annotations

from rolecall.advantages import get_estimator
from rolecall.algo.scoring import nonfinite
from rolecall.types import Episode, Turn


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
    rewards_N = [ep.turn_rewards.get(t.index, ep.reward) if ep.turn_rewards else ep.reward
                 for t, ep in zip(turns, owners)]
    groups_N = [group_id(ep, t, key) for t, ep in zip(turns, owners)]
    adv_N, metrics = est.compute(rewards_N, groups_N)
    return turns, adv_N, {f"adv/{k}": v for k, v in metrics.items()}


def credit(episodes: list[Episode], workflow) -> dict[str, float]:
    """After scoring: each turn's reward where the workflow set one, and its own metrics.

    In rising precedence: `team.reward(reply, value)`, `team.grade(reply, ..., reward=True)`
    (the turn gets its own grade), `workflow.turn_rewards(episode)`. Other turns keep the
    outcome. Then a turn the workflow recorded as missing its format (`Workflow.missed_format`)
    loses the workflow's `format_penalty` from whatever it earned. A non-finite value becomes None (unscorable: advantage 0, out of the statistics).
    """
    for ep in episodes:
        own: dict[int, float | None] = dict(ep.set_rewards)
        for name, turns in ep.graded_turns.items():
            own.update((t, r) for t, r in zip(turns, ep.grades(name)) if t is not None)
        own.update(workflow.turn_rewards(ep) or {})
        penalty = getattr(workflow, "format_penalty", 0.0)
        if penalty and ep.reward is not None:  # per-role format credit (Workflow.missed_format)
            for i in ep.info.get("unformatted_turns", ()):
                earned = own.get(i, ep.reward)
                own[i] = None if earned is None else earned - penalty
        if own:
            ep.turn_rewards = {i: (None if v is None or nonfinite(v) else float(v)) for i, v in own.items()}
    return workflow.metrics(episodes)
