"""Credit: which reward each turn gets (the outcome, or the workflow's own per-turn reward) and its
advantage within its group (GRPO grouped by call slot, role, turn or episode)."""
from __future__ import annotations

from rolecall.advantages import estimator_of_roles, get_estimator, options_of
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


def advantages(episodes: list[Episode], estimator: str | dict[str, str], group_by: str | None,
               options: dict | None = None, workflow=None,
               replayed: dict[tuple[int, int], float | None] | None = None) -> tuple[list[Turn], list[float], dict]:
    """Each turn's advantage within its group, by its role's estimator (`estimator_of_roles`). Most
    estimators read the turn's reward (the outcome broadcast to every turn, the paper's default, or
    the workflow's own `turn_rewards`); the counterfactual estimator reads its credit instead,
    the outcome minus what the turn's default would have reached (`workflow.counterfactuals`, else
    `replayed`: (id(episode), turn index) -> the replayed outcome)."""
    turns, owners = flatten(episodes)
    rewards_N = [ep.turn_rewards.get(t.index, ep.reward) if ep.turn_rewards else ep.reward
                 for t, ep in zip(turns, owners)]
    plan = estimator_of_roles(estimator, sorted({t.role for t in turns}))
    per_role = not isinstance(estimator, str)
    adv_N, metrics = [0.0] * len(turns), {}
    for name in sorted(set(plan.values())):
        est = get_estimator(name, options_of(name, options, per_role))
        idx = [i for i, t in enumerate(turns) if plan[t.role] == name]
        key = group_by or est.default_group_by
        if getattr(est, "needs_counterfactuals", False):
            values, cf_metrics = counterfactual_credits([turns[i] for i in idx], [owners[i] for i in idx], workflow,
                                                        replayed or {})
            metrics.update(cf_metrics)
        else:
            values = [rewards_N[i] for i in idx]
        adv, m = est.compute(values, [group_id(owners[i], turns[i], key) for i in idx])
        for i, a in zip(idx, adv):
            adv_N[i] = a
        metrics.update({f"adv/{name}/{k}" if per_role else f"adv/{k}": v for k, v in m.items()})
    return turns, adv_N, metrics


def counterfactual_credits(turns: list[Turn], owners: list[Episode], workflow,
                           replayed: dict[tuple[int, int], float | None]) -> tuple[list[float | None], dict]:
    """Each turn's outcome minus its default's (None where the episode is unscorable or the workflow
    cannot re-read the turn), and per role how many turns changed nothing (`cf_zero_credit`, of
    those with a counterfactual) and how many had none (`cf_unavailable`)."""
    read: dict[int, dict[int, float | None]] = {}
    values: list[float | None] = []
    for turn, ep in zip(turns, owners):
        cfs = read.setdefault(id(ep), workflow.counterfactuals(ep) if workflow is not None else {})
        cf = cfs.get(turn.index, replayed.get((id(ep), turn.index)))
        values.append(None if ep.reward is None or cf is None else ep.reward - cf)
    metrics: dict[str, float] = {}
    for role in sorted({t.role for t in turns}):
        mine = [(t, v) for t, v in zip(turns, values) if t.role == role]
        have = [v for t, v in mine if v is not None]
        metrics[f"role/{role}/cf_unavailable"] = 1 - len(have) / len(mine)
        if have:
            metrics[f"role/{role}/cf_zero_credit"] = sum(v == 0 for v in have) / len(have)
    return values, metrics


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
