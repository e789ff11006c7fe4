"""`eval_opt`: a generator answers, an evaluator judges, the generator revises on critique.

As the paper's code runs it: every generator call is followed by an evaluator call, at most
`rounds` of each (math 3 + 3, code 2 + 2); the last verdict changes no answer but the
evaluator's turn is trained like the others. The evaluator keeps its own conversation: the
problem and first solution, then each revised solution as a follow-up, its earlier
critiques as its own previous turns. A verdict other than `\\boxed{Correct}` (Incorrect or
unparseable; the first verdict box counts, see `parsing.first_verdict`) triggers a revision.
All generator calls share the slot `generator` and all evaluator calls the slot `evaluator`.

With `evaluator_reward`, each evaluator turn is rewarded for a verdict that matches the
truth (Correct on a solution the verifier accepts, Incorrect on one it rejects; an
unparseable verdict earns 0) instead of the episode's outcome; generator turns keep the
outcome. `eval_opt/evaluator_accuracy` is logged either way, beside
`eval_opt/rule_always_correct_acc`: how often a judge that always says Correct would have been
right on the same calls (the share of judged solutions the verifier accepts).

`role_format: plain` (a deviation from the paper, for small models that never box) also reads
a verdict from plain text when a review has no verdict box: its words correct / right /
incorrect / wrong, when they all agree (`parsing.plain_verdict_form`; words of both signs are
no verdict); `team.info["evaluator_forms"]` says, per evaluator call, which kind of reply it
was (`parsing.VERDICT_FORMS`). `format_penalty` (per-role format credit, also a
deviation): an evaluator turn with no verdict earns its reward (the outcome, or its
`evaluator_reward`) less the penalty.
"""
from __future__ import annotations

from statistics import fmean

from rolecall.diagnostics.trajectory import verdict_form
from rolecall.parsing import VERDICT_FORMS, read_verdict
from rolecall.types import Episode, Problem
from rolecall.workflows.base import (Team, Workflow, assistant, form_rates, format_penalty_option, positive_int_option,
                                     role_format_option, user)


class EvalOpt(Workflow):
    name = "eval_opt"
    roles = ("generator", "evaluator")
    role_diagnostics = {"evaluator": ("verdict_form",)}
    templates = {"generator": ("problem",), "evaluator": ("problem", "solution"),
                 "evaluator_followup": ("solution",), "revise": ("critique",)}

    def __init__(self, prompts, rounds: int = 3, evaluator_reward: bool = False, role_format: str = "boxed",
                 format_penalty: float = 0.0) -> None:
        super().__init__(prompts)
        self.rounds = positive_int_option("rounds", rounds)
        if not isinstance(evaluator_reward, bool):
            raise ValueError(f"workflow.options.evaluator_reward: must be true or false, got {evaluator_reward!r}")
        self.evaluator_reward = evaluator_reward
        self.role_format = role_format_option(role_format)
        self.format_penalty = format_penalty_option(format_penalty)

    async def run(self, problem: Problem, team: Team) -> str:
        writer = [user(self.render("generator", problem=problem.prompt))]
        judge: list = []
        verdicts: list[bool | None] = []
        team.info["verdicts"] = verdicts
        forms: list[str] = []
        if self.role_format == "plain":
            team.info["evaluator_forms"] = forms
        for i in range(self.rounds):
            answer = await team.call("generator", writer)
            team.grade(answer, "judged")  # what the evaluator's verdict is checked against
            ask = (self.render("evaluator", problem=problem.prompt, solution=answer.strip()) if i == 0
                   else self.render("evaluator_followup", solution=answer.strip()))
            judge = judge + [user(ask)]
            review = await team.call("evaluator", judge)
            judge = judge + [assistant(review)]  # a new list: the request keeps the one it was sent
            verdict, form = read_verdict(review, self.role_format)
            verdicts.append(verdict)
            if verdict is None:
                self.missed_format(team, review)
            forms.append(form)
            if verdicts[-1] is True or i == self.rounds - 1:
                break
            writer = writer + [assistant(answer), user(self.render("revise", critique=review.strip()))]
        return answer

    answering_roles = ("generator",)

    def rule_outcomes(self, episode: Episode) -> dict[str, dict[str, float | None]]:
        """The evaluator against always accepting: the episode's answer would have been the first draft."""
        judged = episode.grades("judged")
        return {"evaluator": {"always accept": judged[0]}} if judged else {}

    counterfactual_roles = ("evaluator",)

    def counterfactuals(self, episode: Episode) -> dict[int, float | None]:
        """An evaluator turn's default is to accept: a verdict that sent the draft back would have
        made that draft the answer; an acceptance, or the last verdict (it changes nothing), is
        what the default does anyway (credit 0)."""
        judges, drafts = _evaluator_turns(episode), episode.grades("judged")
        out = {}
        for k, (turn, verdict) in enumerate(zip(judges, episode.info.get("verdicts", []))):
            revised = verdict is not True and k < len(judges) - 1
            out[turn.index] = drafts[k] if revised and k < len(drafts) else episode.reward
        return out

    def turn_rewards(self, episode: Episode) -> dict[int, float | None] | None:
        if not self.evaluator_reward:
            return None
        return {t.index: right for t, right in zip(_evaluator_turns(episode), _verdicts_right(episode))}

    def metrics(self, episodes: list[Episode]) -> dict[str, float]:
        right = [r for ep in episodes for r in _verdicts_right(ep) if r is not None]
        # The same calls as `right`: those whose judged solution the verifier could score.
        truth = [r == 1.0 for ep in episodes for _, r in zip(ep.info.get("verdicts", []), ep.grades("judged"))
                 if r is not None]
        out = {"eval_opt/evaluator_accuracy": fmean(right) if right else float("nan"),
               "eval_opt/rule_always_correct_acc": fmean(truth) if truth else float("nan")}
        # The first round alone (the paper's iteration-1 breakdown): the evaluator's form and
        # verdict on the first solution, and whether that first solution hit the token cap.
        firsts = [(ts[0], ep) for ep in episodes if (ts := _evaluator_turns(ep))]
        gens = [t for ep in episodes for t in ep.turns[:1] if t.role == "generator"]
        if firsts:
            forms = [verdict_form(t.completion_text, len(t.completion_ids)) for t, _ in firsts]
            out.update({f"eval_opt/iter1_evaluator_form_{f}": fmean(x == f for x in forms) for f in ("fence", "stamp", "other")})
            verdicts = [read_verdict(t.completion_text, self.role_format)[0] for t, _ in firsts]
            out["eval_opt/iter1_verdict_correct"] = fmean(v is True for v in verdicts)
            out["eval_opt/iter1_verdict_incorrect"] = fmean(v is False for v in verdicts)
            out["eval_opt/iter1_verdict_unparseable"] = fmean(v is None for v in verdicts)
        if gens:
            out["eval_opt/iter1_generator_truncated"] = fmean(t.truncated for t in gens)
        rounds = [sum(t.role == "generator" for t in ep.turns) for ep in episodes]
        out["eval_opt/generator_calls"] = fmean(rounds) if rounds else float("nan")
        forms = [f for ep in episodes for f in ep.info.get("evaluator_forms", [])]
        if self.role_format == "plain" and forms:  # per evaluator call, every round
            out.update(form_rates("eval_opt/evaluator", forms))
            out.update({f"eval_opt/evaluator_form/{k}": fmean(f == k for f in forms) for k in VERDICT_FORMS})
        return out


def _evaluator_turns(ep: Episode) -> list:
    return [t for t in ep.turns if t.role == "evaluator"]


def _verdicts_right(ep: Episode) -> list[float | None]:
    """Per evaluator call: 1.0 if its verdict matches the verifier on the solution it judged,
    0.0 if not (an unparseable verdict included), None if that solution could not be scored."""
    rewards = ep.grades("judged")
    out: list[float | None] = []
    for verdict, reward in zip(ep.info.get("verdicts", []), rewards):
        out.append(None if reward is None else float(verdict is not None and verdict == (reward == 1.0)))
    return out
