"""Rollout-side metrics per role and per step (what the episodes look like, not the gradients)."""
from __future__ import annotations

from collections import defaultdict
from statistics import fmean
from typing import Mapping

from rolecall.diagnostics.trajectory import mixed_group_frac, role_signatures
from rolecall.types import Episode


def rollout_metrics(episodes: list[Episode], signatures: bool = True,
                    role_diagnostics: Mapping[str, tuple[str, ...]] | None = None) -> dict[str, float]:
    out: dict[str, float] = {}
    scored = [ep.reward for ep in episodes if ep.reward is not None]
    out["reward/mean"] = fmean(scored) if scored else float("nan")
    out["reward/unscorable"] = float(sum(ep.reward is None for ep in episodes))
    out["reward/mixed_group_frac"] = mixed_group_frac(episodes)
    out["tokens/per_episode"] = sum(len(t.prompt_ids) + len(t.completion_ids) for ep in episodes for t in ep.turns) / max(1, len(episodes))
    # What the step cost, for comparing runs at equal compute (the grid's matched comparisons):
    # the tokens every role generated, and the problems (groups) the step trained on.
    out["tokens/generated"] = float(sum(len(t.completion_ids) for ep in episodes for t in ep.turns))
    out["rollout/problems"] = float(len({ep.group for ep in episodes}))
    by_role: dict[str, list] = defaultdict(list)
    for ep in episodes:
        for t in ep.turns:
            by_role[t.role].append((t, ep.reward))
    for role, items in by_role.items():
        rewards = [r for _, r in items if r is not None]
        out[f"role/{role}/reward_mean"] = fmean(rewards) if rewards else float("nan")
        out[f"role/{role}/completion_len"] = fmean(len(t.completion_ids) for t, _ in items)
        out[f"role/{role}/truncated_frac"] = fmean(t.truncated for t, _ in items)
        out[f"role/{role}/turns"] = float(len(items))
    # Verifier statuses seen by each role's turns (outcome broadcast: the episode's status).
    status_by_role: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for ep in episodes:
        for t in ep.turns:
            status_by_role[t.role][ep.status or "unscored"] += 1
    for role, counts in status_by_role.items():
        total = sum(counts.values())
        out.update({f"role/{role}/status_{k}": v / total for k, v in counts.items()})
    if signatures:
        out.update(role_signatures(episodes, role_diagnostics))
    return out
