"""`chain`: generator -> verifier -> refiner, each role called once.

The chain-of-agents example of AReaL's multi-agent RL proposal (after "Dr. MAS: Stable
Reinforcement Learning for Multi-Agent LLM Systems", whose agent-wise normalisation it
trains with; `algo.estimator=agentwise`): the generator drafts a solution, the verifier
critiques the draft without solving the problem (with a `\\boxed{Correct}` or
`\\boxed{Incorrect}` verdict), and the refiner, reading the problem and the draft as a
conversation followed by the critique, writes the final answer.

Credit (`credit` option): `outcome` (default, the paper's rule) gives every turn the final
answer's reward; `per_role` rewards each agent for its own job — the generator its draft's
grade, the verifier 1 when its verdict matches that grade (0 when it does not or is
unparseable, unscorable when the draft is), the refiner the outcome. With one call per role,
agent-wise and slot-grouped normalisation form the same groups (identical advantages); with
outcome credit, pooling all roles (`algo.group_by=episode`) only rescales them. Per-role
credit is where agent-wise and pooled normalisation differ.
The draft is always graded (`team.grade`, name `drafts`) so the metrics can tell a
refiner that fixes drafts from one that copies them:
- `chain/draft_acc`: the draft was right;
- `chain/fixed`, `chain/broken`: final right after a wrong draft / wrong after a right one;
- `chain/verdict_acc`: the verifier's verdict matched the draft's grade (unparseable = wrong).

`role_format: plain` (a deviation from the boxed verdict, for small models that never box)
also reads the verdict from plain text when the critique has no verdict box: its words
correct / right / incorrect / wrong when they agree (`parsing.plain_verdict_form`); `team.info["verifier_form"]`
says which form gave it, and `chain/verifier_parsed` / `chain/verifier_plain` are logged.
`format_penalty` (per-role format credit, also a deviation): a verifier turn with no verdict
earns its reward (the outcome, or its `per_role` credit) less the penalty.
"""
from __future__ import annotations

from statistics import fmean

from rolecall.parsing import read_verdict
from rolecall.types import Episode, Problem
from rolecall.workflows.base import (Team, Workflow, assistant, form_rates, format_penalty_option, role_format_option,
                                     user)


class Chain(Workflow):
    name = "chain"
    roles = ("generator", "verifier", "refiner")
    answering_roles = ("generator", "refiner")  # both write a solution; the verifier critiques
    templates = {"generator": ("problem",), "verifier": ("problem", "solution"), "refiner": ("critique",)}
    role_diagnostics = {"verifier": ("verdict_form",)}

    def __init__(self, prompts, credit: str = "outcome", role_format: str = "boxed",
                 format_penalty: float = 0.0) -> None:
        if credit not in ("outcome", "per_role"):
            raise ValueError(f"workflow.options.credit must be 'outcome' or 'per_role', got {credit!r}")
        self.credit = credit
        self.role_format = role_format_option(role_format)
        self.format_penalty = format_penalty_option(format_penalty)
        super().__init__(prompts)

    async def run(self, problem: Problem, team: Team) -> str:
        draft = await team.call("generator", [user(self.render("generator", problem=problem.prompt))])
        team.grade(draft, "drafts", reward=self.credit == "per_role")
        critique = await team.call("verifier", [user(self.render(
            "verifier", problem=problem.prompt, solution=draft.strip()))])
        team.info["verdict"], form = read_verdict(critique, self.role_format)
        if self.role_format == "plain":
            team.info["verifier_form"] = form
        team.info["verifier_turn"] = critique.turn
        if team.info["verdict"] is None:
            self.missed_format(team, critique)
        # The refiner reads the draft as the answer to the generator's prompt, then the critique:
        # the same conversation shape as a revision, played by its own role.
        return await team.call("refiner", [user(self.render("generator", problem=problem.prompt)), assistant(draft),
                                           user(self.render("refiner", critique=critique.strip()))])

    def turn_rewards(self, episode: Episode) -> dict[int, float | None] | None:
        """Per-role credit: the verifier is paid for a verdict that matches the draft's grade."""
        if self.credit != "per_role" or "verifier_turn" not in episode.info:
            return None
        drafts = episode.grades("drafts")
        if not drafts:
            return None
        draft = drafts[0]
        verdict = episode.info.get("verdict")
        paid = None if draft is None else float(verdict is not None and verdict == (draft >= 0.5))
        return {episode.info["verifier_turn"]: paid}

    def metrics(self, episodes: list[Episode]) -> dict[str, float]:
        pairs = [(d[0] == 1.0, ep.reward == 1.0, ep.info.get("verdict")) for ep in episodes
                 if (d := ep.grades("drafts")) and d[0] is not None and ep.reward is not None]
        if not pairs:
            return {}
        wrong = [final for draft, final, _ in pairs if not draft]
        right = [final for draft, final, _ in pairs if draft]
        out = {"chain/draft_acc": fmean(draft for draft, _, _ in pairs),
               "chain/fixed": fmean(wrong) if wrong else float("nan"),
               "chain/broken": fmean(not f for f in right) if right else float("nan"),
               "chain/verdict_acc": fmean(v is not None and v == draft for draft, _, v in pairs)}
        if self.role_format == "plain":
            out.update(form_rates("chain/verifier", [ep.info["verifier_form"] for ep in episodes
                                                     if "verifier_form" in ep.info]))
        return out
