"""`debate` (MAPoRL): n agents answer, then revise over rounds after reading each other.

From "MAPoRL: Multi-Agent Post-Co-Training for Collaborative Large Language Models with
Reinforcement Learning". Round 0: every agent answers the problem on its own. Rounds 1..R-1:
every agent sees its own previous answer and its peers' and answers again. `peer_scores`
adds a verdict after each peer's answer: `verifier` from the run's outcome grader (a score
>= 0.5 reads "checked: correct"), `scorer` from a scorer role of the run (an LLM, trainable),
`none` (default) shows the answers bare. The final answer is the majority of the last round's boxed
answers (ties: the lowest agent). Every (round t, agent a) answer is graded by the run's
verifier (s_{t,a}; `team.grade`, name `answers`) and rewarded on its own turn with the
discounted future mean of the scores,

    R_{t,a} = (s_{t,a} + sum_{t'>t} gamma^(t'-t) * mean_a' s_{t',a'}) / sum_{t'>=t} gamma^(t'-t)

plus the collaboration incentives, for t >= 1, from correctness c = (s >= 0.5):
- `alpha_correct` (+): the agent was wrong in round t-1 and is right in round t;
- `alpha_persuade` (+): the agent was right in round t-1 and stays right, times the share of
  its peers that were wrong in t-1 and are right in t;
- `alpha_abandon` (-): right in t-1, wrong in t, while most of round t-1 was right (it left
  a correct consensus);
- `alpha_misled` (-): right in t-1, wrong in t, while most of its peers were wrong in t-1
  (persuaded to a wrong answer).
The paper gives the incentives' kinds, not one formula: this is rolecall's form, each term
off at 0. Unscorable scores are left out of the round means; a turn whose own score is
unscorable gets reward None (advantage 0). Scorer turns get the outcome reward.

`agents: slots` (default) plays every agent with one role, `debater`, in slots
`agent0..agent{n-1}` (one policy, as co-training with a shared model); `agents: roles` gives
each agent its own role `agent0..` (route them to separate policies, or some to `base` to
train one debater against frozen peers).

`role_format: plain` (a deviation from the boxed verdict, for small models that never box)
also reads the scorer's verdict (`peer_scores: scorer`) from plain text when its reply has no
verdict box: its words correct / right / incorrect / wrong when they agree (`parsing.plain_verdict_form`);
`team.info["scorer_forms"]` records the form of every scorer call. The final majority still
counts boxed answers only, unless `answer_from` (`boxed_or_last_number`, `boxed_or_last_line`;
set it as the run's `reward.answer_from`) reads the answers of replies without a box too: a small
model that never boxes would otherwise have every final answer be agent 0's.
`format_penalty` (per-role format credit, also a deviation): a scorer turn with no verdict
earns the outcome less the penalty.
"""
from __future__ import annotations

import asyncio
from statistics import fmean

from rolecall.parsing import final_answer, read_verdict
from rolecall.types import Episode, Problem, Reply
from rolecall.workflows.base import (Team, Workflow, answer_from_option, form_rates, format_penalty_option,
                                     positive_int_option, role_format_option, user)
from rolecall.workflows.voting import majority_choice, majority_index


def future_mean_rewards(scores: list[list[float | None]], gamma: float) -> list[list[float | None]]:
    """R_{t,a} of the module docstring (without incentives); scores[t][a], None = unscorable."""
    rounds = len(scores)
    means = [fmean(v) if (v := [s for s in row if s is not None]) else None for row in scores]
    out: list[list[float | None]] = []
    for t, row in enumerate(scores):
        later = [(gamma ** (u - t), means[u]) for u in range(t + 1, rounds) if means[u] is not None]
        norm = 1.0 + sum(w for w, _ in later)
        tail = sum(w * m for w, m in later)
        out.append([None if s is None else (s + tail) / norm for s in row])
    return out


def incentives(scores: list[list[float | None]], alphas: tuple[float, float, float, float]) -> list[list[float]]:
    """The collaboration terms of the module docstring, per (round, agent); 0 in round 0."""
    a_correct, a_persuade, a_abandon, a_misled = alphas
    out = [[0.0] * len(row) for row in scores]
    for t in range(1, len(scores)):
        before, now = scores[t - 1], scores[t]
        n = len(now)
        for a in range(n):
            if before[a] is None or now[a] is None:
                continue
            was, is_ = before[a] >= 0.5, now[a] >= 0.5
            peers = [b for b in range(n) if b != a and before[b] is not None and now[b] is not None]
            if not was and is_:
                out[t][a] += a_correct
            if was and is_ and peers:
                won = sum(before[b] < 0.5 <= now[b] for b in peers)
                out[t][a] += a_persuade * won / len(peers)
            if was and not is_:
                scored_before = [s for s in before if s is not None]
                if sum(s >= 0.5 for s in scored_before) > len(scored_before) / 2:
                    out[t][a] -= a_abandon
                elif peers and sum(before[b] < 0.5 for b in peers) > len(peers) / 2:
                    out[t][a] -= a_misled
    return out


class Debate(Workflow):
    name = "debate"
    roles = ("debater",)  # with the default options; the instance sets its own

    def __init__(self, prompts, n_agents: int = 3, rounds: int = 3, gamma: float = 0.3,
                 alpha_correct: float = 0.1, alpha_persuade: float = 0.1, alpha_abandon: float = 0.1,
                 alpha_misled: float = 0.1, agents: str = "slots", peer_scores: str = "none",
                 role_format: str = "boxed", format_penalty: float = 0.0, answer_from: str = "boxed") -> None:
        self.n_agents = positive_int_option("n_agents", n_agents)
        self.answer_from = answer_from_option(answer_from)
        self.rounds = positive_int_option("rounds", rounds)
        if agents not in ("slots", "roles"):
            raise ValueError(f"workflow.options.agents must be 'slots' or 'roles', got {agents!r}")
        if peer_scores not in ("none", "scorer", "verifier"):
            raise ValueError(f"workflow.options.peer_scores must be 'none', 'scorer' or 'verifier', got {peer_scores!r}")
        for key, value in (("gamma", gamma), ("alpha_correct", alpha_correct), ("alpha_persuade", alpha_persuade),
                           ("alpha_abandon", alpha_abandon), ("alpha_misled", alpha_misled)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"workflow.options.{key}: must be a number >= 0, got {value!r}")
        self.gamma, self.alphas = float(gamma), (alpha_correct, alpha_persuade, alpha_abandon, alpha_misled)
        self.agents, self.peer_scores = agents, peer_scores
        self.role_format = role_format_option(role_format)
        self.format_penalty = format_penalty_option(format_penalty)
        self.agent_roles = (tuple(f"agent{a}" for a in range(self.n_agents)) if agents == "roles"
                            else ("debater",) * self.n_agents)
        self.roles = tuple(dict.fromkeys(self.agent_roles)) + (("scorer",) if peer_scores == "scorer" else ())
        self.answering_roles = tuple(dict.fromkeys(self.agent_roles))  # every debater answers; a scorer judges
        self.counterfactual_roles = self.answering_roles  # last-round turns: see counterfactuals
        self.templates = {"generator": ("problem",), "debate": ("problem", "own", "peers"),
                          **({"scorer": ("problem", "solution")} if peer_scores == "scorer" else {})}
        super().__init__(prompts)

    async def _ask(self, team: Team, a: int, text: str) -> Reply:
        role = self.agent_roles[a]
        return await team.call(role, [user(text)], slot=f"agent{a}" if self.agents == "slots" else role)

    async def run(self, problem: Problem, team: Team) -> str:
        answers = list(await asyncio.gather(*(
            self._ask(team, a, self.render("generator", problem=problem.prompt)) for a in range(self.n_agents))))
        table = [answers]
        for _ in range(1, self.rounds):
            notes = await self._scores(team, problem, answers)
            answers = list(await asyncio.gather(*(
                self._ask(team, a, self.render("debate", problem=problem.prompt, own=answers[a].strip(),
                                               peers=self._peers(answers, notes, a)))
                for a in range(self.n_agents))))
            table.append(answers)
        for row in table:
            for reply in row:
                team.grade(reply, "answers")
        team.info["debate_turns"] = [[r.turn for r in row] for row in table]
        last = table[-1]
        if self.answer_from == "boxed":
            return last[majority_choice(last) - 1]
        return last[majority_index([final_answer(r, self.answer_from).text for r in last]) - 1]

    async def _scores(self, team: Team, problem: Problem, answers: list[Reply]) -> list[str]:
        """The note shown after each peer's answer: the scorer's verdict, the verifier's, or none."""
        if self.peer_scores == "none":
            return [""] * len(answers)
        if self.peer_scores == "verifier":
            values = await asyncio.gather(*(team.check(a) for a in answers))
            verdicts = [None if v is None else v >= 0.5 for v in values]
        else:
            replies = await asyncio.gather(*(team.call("scorer", [user(self.render(
                "scorer", problem=problem.prompt, solution=a.strip()))], slot="scorer") for a in answers))
            read = [read_verdict(v, self.role_format) for v in replies]
            verdicts = [v for v, _ in read]
            for reply, verdict in zip(replies, verdicts):
                if verdict is None:
                    self.missed_format(team, reply)
            if self.role_format == "plain":
                team.info.setdefault("scorer_forms", []).extend(form for _, form in read)
        return [{True: " (checked: correct)", False: " (checked: incorrect)"}.get(v, "") for v in verdicts]

    @staticmethod
    def _peers(answers: list[Reply], notes: list[str], a: int) -> str:
        """The other agents' answers, numbered after the agent's own (which is number 1)."""
        others = [b for b in range(len(answers)) if b != a]
        return "\n".join(f"{i + 2}: {answers[b].strip()}{notes[b]}" for i, b in enumerate(others))

    def _scores_table(self, ep: Episode) -> list[list[float | None]]:
        grades, n = ep.grades("answers"), self.n_agents
        return [grades[t * n:(t + 1) * n] for t in range(len(grades) // n)]

    def turn_rewards(self, episode: Episode) -> dict[int, float | None] | None:
        turns = episode.info.get("debate_turns")
        scores = self._scores_table(episode)
        if not turns or len(scores) != len(turns):
            return None
        base, extra = future_mean_rewards(scores, self.gamma), incentives(scores, self.alphas)
        return {turns[t][a]: (None if base[t][a] is None else base[t][a] + extra[t][a])
                for t in range(len(turns)) for a in range(self.n_agents)}

    def counterfactuals(self, episode: Episode) -> dict[int, float | None]:
        """A debater's default is its previous answer. Only a last-round turn's effect can be re-read:
        the final majority is counted again with that agent's previous answer in its place. An
        earlier round's answer shaped what the others read next, which no re-count can undo."""
        turns, scores = episode.info.get("debate_turns"), self._scores_table(episode)
        if not turns or len(turns) < 2 or len(scores) != len(turns):
            return {}
        text = {t.index: t.completion_text for t in episode.turns}
        last, before = turns[-1], turns[-2]
        out = {}
        for a in range(self.n_agents):
            ballot = [(before[a], scores[-2][a]) if b == a else (last[b], scores[-1][b]) for b in range(self.n_agents)]
            texts = [text.get(i, "") for i, _ in ballot]
            if self.answer_from == "boxed":
                won = majority_choice(texts)
            else:
                won = majority_index([final_answer(x, self.answer_from).text for x in texts])
            out[last[a]] = ballot[won - 1][1]
        return out

    def metrics(self, episodes: list[Episode]) -> dict[str, float]:
        """Accuracy of each round's answers, and how often agents changed right<->wrong."""
        tables = [s for ep in episodes if (s := self._scores_table(ep))]
        if not tables:
            return {}
        out = {}
        for t in range(self.rounds):
            vals = [s >= 0.5 for tab in tables if t < len(tab) for s in tab[t] if s is not None]
            if vals:
                out[f"debate/round{t}_acc"] = fmean(vals)
        if self.role_format == "plain":
            out.update(form_rates("debate/scorer", [f for ep in episodes for f in ep.info.get("scorer_forms", [])]))
        flips = [(b >= 0.5, c >= 0.5) for tab in tables for t in range(1, len(tab))
                 for b, c in zip(tab[t - 1], tab[t]) if b is not None and c is not None]
        if flips:
            out["debate/fixed"] = fmean(not b and c for b, c in flips)
            out["debate/broken"] = fmean(b and not c for b, c in flips)
        return out
