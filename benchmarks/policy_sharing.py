"""Isolated- vs Shared-Policy cost on the same run: the two stacks alternate step by step, so
the machine's drift between steps cancels in each pair's ratio. Used by run.py and compute.py."""
from __future__ import annotations

import time
from statistics import fmean, median


def ip_sp_cost(steps: int = 4, extra: tuple[str, ...] = ()) -> dict:
    """Isolated vs Shared Policy on the default voting run (`extra`: more config overrides),
    the two stacks alternating step by step after one warm-up step each."""
    from rolecall.config import load_config
    from rolecall.train.stack import build_stack
    from rolecall.train.step import train_step

    stacks = {r: build_stack(load_config(None, [f"routing={r}", *extra])) for r in ("isolated", "shared")}
    try:
        for s in stacks.values():
            train_step(s, 1)  # warm-up
        per_ktok: dict[str, list[float]] = {"isolated": [], "shared": []}
        per_step: dict[str, list[float]] = {"isolated": [], "shared": []}
        rollout: dict[str, list[float]] = {"isolated": [], "shared": []}  # of which generation and scoring
        for step in range(2, 2 + steps):
            for r in (("isolated", "shared") if step % 2 else ("shared", "isolated")):
                t0 = time.perf_counter()
                row, eps = train_step(stacks[r], step)
                dt = time.perf_counter() - t0
                tokens = sum(len(t.prompt_ids) + len(t.completion_ids) for e in eps for t in e.turns)
                per_step[r].append(dt)
                rollout[r].append(row["time/rollout_s"])
                per_ktok[r].append(1000 * dt / tokens)
    finally:  # the verifier workers of both stacks
        for s in stacks.values():
            s.close()
    # Each step's pair ran back to back: their ratio cancels the drift between pairs, and the
    # median of those ratios is not carried off by one step the machine slowed down.
    pairs = [i / s for i, s in zip(per_ktok["isolated"], per_ktok["shared"])]
    return {"steps": steps, "ip_s_per_step": fmean(per_step["isolated"]), "sp_s_per_step": fmean(per_step["shared"]),
            "ip_s_per_ktoken": fmean(per_ktok["isolated"]), "sp_s_per_ktoken": fmean(per_ktok["shared"]),
            # IP's cost over SP's: above 1 when isolated adapters cost more per token
            "ip_sp_cost_ratio": fmean(per_ktok["isolated"]) / fmean(per_ktok["shared"]),
            "ip_sp_pair_ratios": [round(r, 4) for r in pairs], "ip_sp_median_pair_ratio": median(pairs),
            "ip_s_per_step_each": per_step["isolated"], "sp_s_per_step_each": per_step["shared"],
            "ip_rollout_s_each": rollout["isolated"], "sp_rollout_s_each": rollout["shared"]}
