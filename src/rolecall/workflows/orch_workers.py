"""`orch_workers`: an orchestrator proposes strategies, workers solve, a synthesizer decides.

The orchestrator lists up to n *strategies* (not solutions), one per line; each of n
workers solves the whole problem with one strategy, in parallel; the synthesizer compares
their solutions and writes the final answer. Workers share the slot `worker` (one GRPO
group of up to n x G turns), as in the paper's code. Missing strategies (fewer lines than
workers) are filled with the `default_strategy` template and counted in `team.info`;
`orch_workers/orchestrator_parsed` is the share of plans that gave all n. `format_penalty`
(per-role format credit, a deviation from the paper's outcome-only reward): an orchestrator
turn whose plan fell short earns the outcome less the penalty.
"""
from __future__ import annotations

import asyncio
import re

from statistics import fmean

from rolecall.types import Episode, Problem
from rolecall.workflows.base import Team, Workflow, format_penalty_option, positive_int_option, user

_NUMBERING = re.compile(r"^\s*(?:[-*]|\(?\d+[.):](?!\d)|strategy\s*\d+\s*[:.])\s*", re.IGNORECASE)


def parse_strategies(text: str, n: int) -> list[str]:
    """Up to n non-empty, distinct strategies with list numbering removed.

    When some lines are list items (`1.`, `2)`, `-`, `Strategy 3:`), only those count, so a
    preamble such as "Here are three strategies:" is not taken for a strategy; otherwise
    every non-empty line is one.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    items = [line for line in lines if _NUMBERING.match(line)]
    out: list[str] = []
    for line in items or lines:
        s = _NUMBERING.sub("", line, count=1).strip()
        if s and s not in out:
            out.append(s)
    return out[:n]


class OrchWorkers(Workflow):
    name = "orch_workers"
    roles = ("orchestrator", "worker", "synthesizer")
    role_diagnostics = {"orchestrator": ("distinct_openers",)}
    templates = {"orchestrator": ("problem", "n"), "worker": ("problem", "strategy"),
                 "synthesizer": ("problem", "solutions")}

    def __init__(self, prompts, n_workers: int = 3, format_penalty: float = 0.0) -> None:
        super().__init__(prompts)
        self.n_workers = positive_int_option("n_workers", n_workers)
        self.format_penalty = format_penalty_option(format_penalty)

    async def run(self, problem: Problem, team: Team) -> str:
        plan = await team.call("orchestrator", [user(self.render(
            "orchestrator", problem=problem.prompt, n=self.n_workers))])
        strategies = parse_strategies(plan, self.n_workers)
        team.info["strategies_missing"] = self.n_workers - len(strategies)
        if len(strategies) < self.n_workers:
            self.missed_format(team, plan)
        strategies += [self.prompts["default_strategy"].strip()] * (self.n_workers - len(strategies))
        solutions = await asyncio.gather(*(
            team.call("worker", [user(self.render("worker", problem=problem.prompt, strategy=s))])
            for s in strategies))
        for s in solutions:
            team.grade(s, "workers")  # scored for pass@k over the workers
        listing = "\n".join(f"{i + 1}: {s.strip()}" for i, s in enumerate(solutions))
        return await team.call("synthesizer", [user(self.render(
            "synthesizer", problem=problem.prompt, solutions=listing))])

    def metrics(self, episodes: list[Episode]) -> dict[str, float]:
        """pass@k over the workers (some worker solved it), the workers' own accuracy, and how
        often the synthesizer ended right when some worker was right."""
        oracle, acc, kept = [], [], []
        for ep in episodes:
            rewards = ep.grades("workers")
            right = [r == 1.0 for r in rewards if r is not None]
            if not right:
                continue
            oracle.append(any(right))
            acc.extend(right)
            if any(right) and ep.reward is not None:
                kept.append(ep.reward == 1.0)
        parsed = {"orch_workers/orchestrator_parsed": fmean(ep.info["strategies_missing"] == 0 for ep in episodes)
                  } if episodes and all("strategies_missing" in ep.info for ep in episodes) else {}
        if not oracle:
            return parsed
        return {"orch_workers/pass_at_k": fmean(oracle), "orch_workers/worker_acc": fmean(acc),
                "orch_workers/synthesis_acc": fmean(kept) if kept else float("nan"), **parsed}
