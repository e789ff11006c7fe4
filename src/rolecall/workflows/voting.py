"""`voting`: n generators answer independently; an aggregator picks one by `\\boxed{k}`.

Slots follow the paper's code: `generator0..n-1` (one GRPO group each) and `aggregator`.
Fallback when the aggregator's pick is unparseable or out of range (`fallback` option):
`first` (default) takes candidate 1; `majority` takes the most common boxed answer, ties to
the lowest index, unboxed candidates never winning unless none has a box (then candidate 1).
The default is `first` because a majority fallback *rewards* an unparseable aggregator
whenever majority vote beats its own picks: measured on the embedded model, the aggregator
learned to emit newlines within ten steps. The fallback is recorded in `team.info`.

`role_format: plain` (a deviation from the paper, for small models that never box) also reads
the pick from plain text when the reply has no usable box, only when it names exactly one
candidate (`parsing.plain_pick_form`): a count echoed from the question, a number that is also
a candidate's answer, or several candidates named are no pick. `team.info["aggregator_form"]`
says which kind of reply it was (`parsing.PICK_FORMS`). The candidates' answers it is given,
recorded as `team.info["candidate_answers"]`, are each candidate's last box, else its last
plain number (`final_answer(..., "boxed_or_last_number")`): the values a reply could be stating,
read the same way whatever `reward.answer_from` is, since the workflow does not see it.
`format_penalty` (another deviation, per-role format credit): an aggregator turn whose reply
named no candidate earns the outcome less the penalty, since the fallback, not it, picked.

`metrics` sets the aggregator beside trivial rules on the same episodes (those where some
candidate was right): `voting/rule_first_acc` (always candidate 1) and
`voting/rule_majority_acc` (the most common of `candidate_answers`, ties to the lowest index,
candidate 1 when none has one), so that `voting/selection_acc` shows what the aggregator adds.

`aggregator: majority` replaces the LLM aggregator by a plain majority vote over the boxed
answers (self-consistency, from "Self-Consistency Improves Chain of Thought Reasoning in
Language Models"): the workflow then has one role, `generator`, and no aggregator turn.
"""
from __future__ import annotations

import asyncio
from collections import Counter
from statistics import fmean

from rolecall.parsing import PICK_FORMS, boxed_pick, final_answer, last_boxed, read_pick
from rolecall.types import Episode, Problem
from rolecall.workflows.base import Team, Workflow, format_penalty_option, positive_int_option, role_format_option, user


def parse_choice(text: str, n: int) -> int | None:
    """1-based candidate number from the aggregator's last box, or None if unusable."""
    return boxed_pick(text, n)


def majority_choice(candidates: list[str]) -> int:
    """Deterministic fallback: the 1-based index of the first candidate with the most common box."""
    return majority_index([last_boxed(c) for c in candidates])


def majority_index(answers: list[str | None]) -> int:
    """The 1-based index of the first of the most common answers (whitespace ignored); None
    never wins, and when every answer is None it is candidate 1."""
    keys = [None if a is None else "".join(a.split()) for a in answers]
    counts = Counter(k for k in keys if k is not None)
    if not counts:
        return 1
    top = max(counts.values())
    return next(i + 1 for i, k in enumerate(keys) if k is not None and counts[k] == top)


class Voting(Workflow):
    name = "voting"
    roles = ("generator", "aggregator")
    templates = {"generator": ("problem",), "aggregator": ("problem", "candidates", "n")}

    def __init__(self, prompts, n_voters: int = 3, fallback: str = "first", aggregator: str = "llm",
                 role_format: str = "boxed", format_penalty: float = 0.0) -> None:
        if aggregator not in ("llm", "majority"):
            raise ValueError(f"workflow.options.aggregator must be 'llm' or 'majority', got {aggregator!r}")
        self.aggregator = aggregator
        if aggregator == "majority":  # no aggregator role, no aggregator template to check
            self.roles = ("generator",)
            self.templates = {"generator": ("problem",)}
        super().__init__(prompts)
        self.n_voters = positive_int_option("n_voters", n_voters)
        if fallback not in ("first", "majority"):
            raise ValueError(f"workflow.options.fallback must be 'first' or 'majority', got {fallback!r}")
        self.fallback = fallback
        self.role_format = role_format_option(role_format)
        self.format_penalty = format_penalty_option(format_penalty)
        # A voter's ballot can be re-counted only when a majority, not an LLM, picks; under an LLM
        # aggregator it is replayed (the aggregator asked again without it).
        self.counterfactual_roles = ("generator",) if aggregator == "majority" else ("aggregator",)
        self.replay_roles = () if aggregator == "majority" else ("generator",)

    async def run(self, problem: Problem, team: Team) -> str:
        ask = [user(self.render("generator", problem=problem.prompt))]
        candidates = list(await asyncio.gather(*(
            team.call("generator", ask, slot=f"generator{i}") for i in range(self.n_voters))))
        answers = [final_answer(c, "boxed_or_last_number").text for c in candidates]
        team.info["candidate_answers"] = answers  # what a plain pick must not be, and the majority rule's votes
        if self.aggregator == "majority":
            choice = majority_choice(candidates)
        else:
            listing = "\n".join(f"{i + 1}: {c.strip()}" for i, c in enumerate(candidates))
            pick = await team.call("aggregator", [user(self.render(
                "aggregator", problem=problem.prompt, candidates=listing, n=self.n_voters))])
            choice, form = read_pick(pick, self.n_voters, self.role_format, answers=answers)
            team.info["aggregator_fallback"] = choice is None
            if choice is None:
                self.missed_format(team, pick)
            if self.role_format == "plain":
                team.info["aggregator_form"] = form
            if choice is None:
                choice = majority_choice(candidates) if self.fallback == "majority" else 1
        for c in candidates:
            team.grade(c, "candidates")  # for pass@k and the aggregator's selection accuracy
        team.info["selected"] = choice
        return candidates[choice - 1]

    answering_roles = ("generator",)

    def rule_outcomes(self, episode: Episode) -> dict[str, dict[str, float | None]]:
        """The aggregator against always taking the first candidate and against the voters' majority
        (`majority_index` over `candidate_answers`), each read off the candidates' grades."""
        grades = episode.grades("candidates")
        if self.aggregator != "llm" or not grades:
            return {}
        rules = {"first": grades[0]}
        if (answers := episode.info.get("candidate_answers")) is not None:
            rules["majority"] = grades[majority_index(answers) - 1]
        return {"aggregator": rules}

    def counterfactuals(self, episode: Episode) -> dict[int, float | None]:
        """The aggregator's default is the workflow's fallback rule (`fallback`: the first candidate,
        or the majority): the pick it would have made without the aggregator. Under `aggregator:
        majority` a voter's default is leaving its ballot out: the majority of the others."""
        grades, answers = episode.grades("candidates"), episode.info.get("candidate_answers")
        if not grades or answers is None:
            return {}
        if self.aggregator == "majority":
            voters = [t for t in episode.turns if t.role == "generator"]
            out = {}
            for i, turn in enumerate(voters):
                rest = [j for j in range(len(answers)) if j != i]
                out[turn.index] = grades[rest[majority_index([answers[j] for j in rest]) - 1]] if rest else None
            return out
        pick = next((t for t in episode.turns if t.role == "aggregator"), None)
        if pick is None:
            return {}
        rule = majority_index(answers) if self.fallback == "majority" else 1
        return {pick.index: grades[rule - 1]}

    async def replay(self, episode: Episode, turn: int, team: Team) -> str | None:
        """A voter left out of the ballot: the aggregator is asked again with the other candidates
        (its default pick, the fallback rule, where it names none)."""
        voters = [t for t in episode.turns if t.role == "generator"]
        answers = episode.info.get("candidate_answers")
        if turn not in [t.index for t in voters] or answers is None or len(voters) < 2:
            return None
        kept = [(t.completion_text, a) for t, a in zip(voters, answers) if t.index != turn]
        listing = "\n".join(f"{i + 1}: {c.strip()}" for i, (c, _) in enumerate(kept))
        pick = await team.call("aggregator", [user(self.render(
            "aggregator", problem=episode.problem.prompt, candidates=listing, n=len(kept)))])
        choice, _ = read_pick(pick, len(kept), self.role_format, answers=[a for _, a in kept])
        if choice is None:
            choice = majority_index([a for _, a in kept]) if self.fallback == "majority" else 1
        return kept[choice - 1][0]

    def oracle_outcome(self, episode: Episode) -> float | None:
        """The best candidate's grade: what an aggregator that always picked a right one would reach."""
        scored = [g for g in episode.grades("candidates") if g is not None]
        return max(scored) if scored else None

    def metrics(self, episodes: list[Episode]) -> dict[str, float]:
        """pass@k over the candidates; how often the pick was right when some candidate was, and
        how often the trivial rules (always the first, the majority) were on those episodes; how
        often the aggregator's reply named no candidate (the fallback was used); under
        `role_format: plain`, the share of each kind of reply (`parsing.PICK_FORMS`)."""
        oracle, picked_right, first_right, majority_right = [], [], [], []
        for ep in episodes:
            right = [r == 1.0 for r in ep.grades("candidates")]
            if not right:
                continue
            oracle.append(any(right))
            if any(right):
                picked_right.append(right[ep.info["selected"] - 1])
                first_right.append(right[0])
                if (answers := ep.info.get("candidate_answers")) is not None:
                    majority_right.append(right[majority_index(answers) - 1])
        if not oracle:
            return {}
        out = {"voting/pass_at_k": fmean(oracle)}
        for key, hits in (("selection_acc", picked_right), ("rule_first_acc", first_right),
                          ("rule_majority_acc", majority_right)):
            out[f"voting/{key}"] = fmean(hits) if hits else float("nan")
        if self.aggregator == "llm":
            out["voting/aggregator_fallback"] = fmean(bool(ep.info.get("aggregator_fallback")) for ep in episodes)
            forms = [ep.info["aggregator_form"] for ep in episodes if "aggregator_form" in ep.info]
            if self.role_format == "plain" and forms:  # `<role>_parsed`, as the other workflows' parsed roles
                out["voting/aggregator_parsed"] = fmean(f in ("boxed", "plain") for f in forms)
                out["voting/aggregator_plain"] = fmean(f == "plain" for f in forms)
                out.update({f"voting/aggregator_form/{k}": fmean(f == k for f in forms) for k in PICK_FORMS})
        return out
