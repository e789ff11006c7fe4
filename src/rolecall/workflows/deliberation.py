"""`deliberation` (MPDF): agents answer, then each round a deliberator chooses, per agent,
PERSIST (keep the answer), REFINE (the agent's LLM answers again after reading its peers) or
CONCEDE (adopt a peer's answer); the final answer is the consensus (majority).

From "Learning to Deliberate: Meta-policy Collaboration for Agentic LLMs with Multi-agent
Reinforcement Learning". Round 0: every agent (`agents`, default 3; role `agent`, slots
`agent0..`) solves the problem and reports its reasoning profile (Steps, Operations,
Confidence) in the same reply. Then for `rounds` rounds (default 3) the deliberator sees each
agent's meta-cognitive state (`rolecall.metapolicy.features`: its parsed answer, profile and
agreement with its peers) and picks the agents' actions simultaneously.

The critic (`critic: true`, role `critic`): the paper's introspective confidence. Every reply an
agent holds, at round 0 and after every round, is judged by the same backbone prompted as a
critic (template `critic`: the problem and the reply), and its Correct / Incorrect verdict
joins that agent's state (`critic_correct`, `critic_missing`). A reply is judged once per
episode: a PERSIST keeps its verdict, a CONCEDE adopts the peer's reply with its verdict, and
only a REFINE's new reply is judged. `role_format: plain` also reads a verdict from plain words
(`rolecall.parsing.read_verdict`); `answer_from` (`boxed`, `boxed_or_last_number`,
`boxed_or_last_line`) reads an agent's answer from a reply without a box, for small models.

The deliberator (`deliberator` option): `persist`, `refine`, `concede` (fixed policies; always
PERSIST is plain majority voting), `random`, `oracle` (knows which answers are right: PERSIST
when right, else CONCEDE when a peer is right, else REFINE; the labels of the supervised
bootstrap), or the path of a meta-policy checkpoint (`rolecall train` writes them; acts
greedily). A CONCEDING agent adopts the reply of the largest group of agreeing peers (ties:
higher mean confidence, then the lower agent); with no peer answer it keeps its own.

Every agent's answer after every round is graded (`answers`, `agents` per round, round 0
first) and the round-0 consensus too (`before`), for the metrics: accuracy before and after
deliberation, action rates per round, agreement. The LLM turns get the outcome reward (the
agents may train with adapters like any workflow's roles).

Counterfactual branches (`counterfactual: true`, set by the meta-policy training to build its
offline corpus): at every round, for every agent i and every action a, the round is replayed
with agent i taking a (the other agents' moves, LLM replies included, are shared), and the
deliberation then runs to its end under the deliberator. Each branch is scored with the
reward of the paper,

    r(i, a) = r_local + r_global
    r_local  = 1[agent i right after the round] - 1[agent i right before it]
    r_global = 1[final consensus right] - 1[final consensus of the other agents right]

from the run's verifier (`team.check`). The rows go to `team.info["deliberation_corpus"]`.
"""
from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from statistics import fmean
from typing import Protocol, Sequence

import yaml

from rolecall.metapolicy.rules import FixedDeliberator, OracleDeliberator, RandomDeliberator
from rolecall.parsing import read_verdict
from rolecall.metapolicy.state import (ACTIONS, CONCEDE, PERSIST, REFINE, AgentState, answer_key, parse_profile,
                                       round_features)
from rolecall.types import Episode, Problem
from rolecall.workflows.base import Team, Workflow, answer_from_option, positive_int_option, role_format_option, user

DELIBERATION_PROMPTS = yaml.safe_load(
    resources.files("rolecall.workflows").joinpath("prompts/deliberation.yaml").read_text("utf-8"))
FIXED = {"persist": PERSIST, "refine": REFINE, "concede": CONCEDE}


@dataclass(frozen=True)
class Table:
    """Where the deliberation stands: each agent's current reply and what it reports."""

    texts: tuple[str, ...]
    states: tuple[AgentState, ...]

    @staticmethod
    def of(texts: Sequence[str], answer_from: str = "boxed") -> "Table":
        return Table(tuple(str(t) for t in texts), tuple(parse_profile(t, answer_from) for t in texts))

    def replace(self, agent: int, text: str, state: AgentState) -> "Table":
        return Table(self.texts[:agent] + (text,) + self.texts[agent + 1:],
                     self.states[:agent] + (state,) + self.states[agent + 1:])


class Deliberator(Protocol):
    """Chooses every agent's action for one round (indices into ACTIONS)."""

    async def decide(self, problem: Problem, team: Team, round_: int, table: Table) -> list[int]: ...


def consensus(states: Sequence[AgentState], among: Sequence[int] | None = None) -> int | None:
    """The agent whose answer is the majority's (ties: the group whose first member is lowest);
    None when no agent in `among` (default: all) has an answer."""
    among = list(range(len(states))) if among is None else list(among)
    keys = {a: answer_key(states[a].answer) for a in among}
    counts = Counter(k for k in keys.values() if k is not None)
    if not counts:
        return None
    top = max(counts.values())
    return next(a for a in among if keys[a] is not None and counts[keys[a]] == top)


def concede_target(states: Sequence[AgentState], agent: int) -> int | None:
    """The peer whose reply a conceding agent adopts: largest agreeing group among the peers,
    then higher mean self-reported confidence (0.5 when missing), then the lower agent."""
    peers = [b for b in range(len(states)) if b != agent and answer_key(states[b].answer) is not None]
    if not peers:
        return None
    groups: dict[str, list[int]] = {}
    for b in peers:
        groups.setdefault(answer_key(states[b].answer), []).append(b)

    def rank(b: int) -> tuple:
        group = groups[answer_key(states[b].answer)]
        conf = fmean(0.5 if states[g].confidence is None else states[g].confidence for g in group)
        return (-len(group), -conf, b)

    return min(peers, key=rank)


class Deliberation(Workflow):
    name = "deliberation"
    roles = ("agent",)
    answering_roles = ("agent",)
    templates = {"solve": ("problem",), "refine": ("problem", "own", "peers")}

    def __init__(self, prompts=DELIBERATION_PROMPTS, agents: int = 3, rounds: int = 3,
                 deliberator: str = "persist", counterfactual: bool = False, seed: int = 0,
                 critic: bool = False, role_format: str = "boxed", answer_from: str = "boxed") -> None:
        self.n_agents = positive_int_option("agents", agents)
        if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 0:
            raise ValueError(f"workflow.options.rounds: must be an integer >= 0, got {rounds!r}")
        self.rounds = rounds
        if not isinstance(counterfactual, bool):
            raise ValueError(f"workflow.options.counterfactual: must be true or false, got {counterfactual!r}")
        self.counterfactual = counterfactual
        if not isinstance(critic, bool):
            raise ValueError(f"workflow.options.critic: must be true or false, got {critic!r}")
        self.critic = critic
        self.role_format = role_format_option(role_format)
        self.answer_from = answer_from_option(answer_from)
        if critic:  # the instance's own roles and templates, set before the base class checks them
            self.roles = ("agent", "critic")
            self.templates = {**self.templates, "critic": ("problem", "solution")}
        self.deliberator: Deliberator = self._deliberator(deliberator, seed)
        super().__init__(prompts)

    @staticmethod
    def _deliberator(name: str, seed: int) -> Deliberator:
        if not isinstance(name, str):
            raise ValueError(f"workflow.options.deliberator: must be a name or a checkpoint path, got {name!r}")
        if name in FIXED:
            return FixedDeliberator(FIXED[name])
        if name == "random":
            return RandomDeliberator(seed)
        if name == "oracle":
            return OracleDeliberator()
        if Path(name).is_file():
            from rolecall.metapolicy.decider import MetaDeliberator  # torch only when a network decides

            return MetaDeliberator.from_checkpoint(name, seed=seed)
        raise ValueError(f"workflow.options.deliberator: {name!r} is not one of {[*FIXED, 'random', 'oracle']} "
                         "nor an existing meta-policy checkpoint file")

    # -- the episode -------------------------------------------------------------------------

    async def run(self, problem: Problem, team: Team) -> str:
        first = await asyncio.gather(*(team.call("agent", [user(self.render("solve", problem=problem.prompt))],
                                                 slot=f"agent{a}") for a in range(self.n_agents)))
        verdicts: dict = {}  # this episode's critic verdicts (tasks), by reply
        table = await self.judged(problem, team, Table.of(first, self.answer_from), verdicts)
        tables, actions, features = [table], [], []
        corpus: list[dict] = []
        for t in range(self.rounds):
            features.append(round_features(list(table.states)))
            chosen = await self.deliberator.decide(problem, team, t, table)
            self._check_actions(chosen)
            after = await self.play(problem, team, table, chosen, verdicts=verdicts)
            if self.counterfactual:
                corpus += await self.branches(problem, team, t, table, chosen, after, verdicts)
            table = after
            tables.append(table)
            actions.append(list(chosen))
        for tab in tables:
            for text in tab.texts:
                team.grade(text, "answers")
        before = consensus(tables[0].states)
        team.grade(tables[0].texts[0 if before is None else before], "before")
        team.info["deliberation"] = {
            "actions": [[ACTIONS[a] for a in row] for row in actions],
            "answers": [[s.answer for s in tab.states] for tab in tables],
            "features": features,  # what the deliberator saw at each round: (own, peers) per agent
        }
        if self.counterfactual:
            team.info["deliberation_corpus"] = corpus
        return self.final(table)

    def _check_actions(self, chosen: list[int]) -> None:
        if len(chosen) != self.n_agents or not all(isinstance(a, int) and 0 <= a < len(ACTIONS) for a in chosen):
            raise ValueError(f"the deliberator returned {chosen!r}; expected {self.n_agents} action indices "
                             f"in 0..{len(ACTIONS) - 1}")

    @staticmethod
    def final(table: Table) -> str:
        winner = consensus(table.states)
        return table.texts[0 if winner is None else winner]

    async def play(self, problem: Problem, team: Team, table: Table, chosen: Sequence[int],
                   refined: dict[int, str] | None = None, verdicts: dict | None = None) -> Table:
        """The table after one round of simultaneous moves (`refined`: REFINE replies already drawn;
        `verdicts`: the critic's verdicts so far, by reply)."""
        refined = dict(refined or {})
        need = [a for a, act in enumerate(chosen) if act == REFINE and a not in refined]
        replies = await asyncio.gather(*(self.refine(problem, team, table, a) for a in need))
        refined.update(zip(need, replies))
        out = table
        for a, act in enumerate(chosen):
            if act == REFINE:
                out = out.replace(a, refined[a], parse_profile(refined[a], self.answer_from))
            elif act == CONCEDE and (b := concede_target(table.states, a)) is not None:
                out = out.replace(a, table.texts[b], table.states[b])
        return await self.judged(problem, team, out, {} if verdicts is None else verdicts)

    async def judged(self, problem: Problem, team: Team, table: Table, verdicts: dict) -> Table:
        """`table` with the critic's verdict on every reply it has not judged (module docstring).
        `verdicts` maps a reply to the task judging it, so that branches played at once share
        one critic call per reply."""
        if not self.critic:
            return table
        for text, st in zip(table.texts, table.states):
            if st.critic is None and text not in verdicts:
                verdicts[text] = asyncio.ensure_future(self._verdict(problem, team, text))
        out = table
        for a, (text, st) in enumerate(zip(table.texts, table.states)):
            if st.critic is None and (v := await verdicts[text]) is not None:
                out = out.replace(a, text, dataclasses.replace(st, critic=v))
        return out

    async def _verdict(self, problem: Problem, team: Team, text: str) -> bool | None:
        reply = await team.call("critic", [user(self.render("critic", problem=problem.prompt, solution=text.strip()))])
        return read_verdict(reply, self.role_format)[0]

    async def refine(self, problem: Problem, team: Team, table: Table, a: int) -> str:
        others = [b for b in range(len(table.texts)) if b != a]
        peers = "\n".join(f"{i + 2}: {table.texts[b].strip()}" for i, b in enumerate(others))
        return await team.call("agent", [user(self.render("refine", problem=problem.prompt,
                                                          own=table.texts[a].strip(), peers=peers))],
                               slot=f"agent{a}")

    # -- counterfactual branches (the offline corpus) ------------------------------------------

    async def branches(self, problem: Problem, team: Team, t: int, table: Table, chosen: list[int],
                       after: Table, verdicts: dict | None = None) -> list[dict]:
        """For every agent and every action: replay round t with only that agent's move changed,
        finish the deliberation under the deliberator, and score it (module docstring)."""
        feats = round_features(list(table.states))
        # The REFINE replies the round already drew are reused by every branch (only REFINE
        # moves read them, so agent i's own is reused exactly when its branch refines too).
        shared = {a: after.texts[a] for a, act in enumerate(chosen) if act == REFINE}
        jobs = []
        for i in range(self.n_agents):
            for k in range(len(ACTIONS)):
                moves = list(chosen)
                moves[i] = k
                jobs.append(self._branch(problem, team, t, table, moves, shared, verdicts))
        ends = await asyncio.gather(*jobs)
        rest_of = [[b for b in range(self.n_agents) if b != i] for i in range(self.n_agents)]
        texts = set(table.texts)
        for i in range(self.n_agents):
            for played, last in ends[i * len(ACTIONS):(i + 1) * len(ACTIONS)]:
                texts.add(played.texts[i])
                for winner in (consensus(last.states), consensus(last.states, rest_of[i])):
                    if winner is not None:
                        texts.add(last.texts[winner])
        right = await self._rights(team, texts)
        rows = []
        for i in range(self.n_agents):
            rewards = []
            for played, last in ends[i * len(ACTIONS):(i + 1) * len(ACTIONS)]:
                full, rest = consensus(last.states), consensus(last.states, rest_of[i])
                r_local = float(right[played.texts[i]]) - float(right[table.texts[i]])
                r_global = (float(full is not None and right[last.texts[full]])
                            - float(rest is not None and right[last.texts[rest]]))
                rewards.append(r_local + r_global)
            rows.append({"round": t, "agent": i, "own": feats[i][0], "peers": feats[i][1], "rewards": rewards,
                         "behaviour": ACTIONS[chosen[i]]})
        return rows

    async def _branch(self, problem, team, t, table, moves, refined, verdicts=None) -> tuple[Table, Table]:
        played = await self.play(problem, team, table, moves, refined, verdicts)
        last = played
        for u in range(t + 1, self.rounds):
            last = await self.play(problem, team, last, await self.deliberator.decide(problem, team, u, last),
                                   verdicts=verdicts)
        return played, last

    @staticmethod
    async def _rights(team: Team, texts: set[str]) -> dict[str, bool]:
        """Whether each text is right by the run's verifier (unscorable counts as not right)."""
        order = sorted(texts)
        scores = await asyncio.gather(*(team.check(t) for t in order))
        return {t: s is not None and s >= 0.5 for t, s in zip(order, scores)}

    # -- metrics -------------------------------------------------------------------------------

    def metrics(self, episodes: list[Episode]) -> dict[str, float]:
        """Accuracy before (round-0 consensus) and after, each round's action rates, agreement."""
        out: dict[str, float] = {}
        before = [g[0] >= 0.5 for ep in episodes if (g := ep.grades("before")) and g[0] is not None]
        after = [ep.reward >= 0.5 for ep in episodes if ep.reward is not None and ep.grades("before")]
        if before:
            out["deliberation/acc_before"] = fmean(before)
        if after:
            out["deliberation/acc_after"] = fmean(after)
        logs = [ep.info["deliberation"] for ep in episodes if "deliberation" in ep.info]
        for t in range(self.rounds):
            row = [a for log in logs if t < len(log["actions"]) for a in log["actions"][t]]
            for name in ACTIONS:
                if row:
                    out[f"deliberation/round{t}_{name}"] = fmean(a == name for a in row)
        agree = []
        for log in logs:
            keys = [answer_key(x) for x in log["answers"][-1]]
            counts = Counter(k for k in keys if k is not None)
            agree.append(max(counts.values()) / len(keys) if counts else 0.0)
        if agree:
            out["deliberation/agreement"] = fmean(agree)
        return out
