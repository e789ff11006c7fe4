"""The noisy oracle's searcher and generator for `search_answer` on the built-in multi-hop world.

It reads the question's relation, follows it through the passages shown (the same sentences
`tasks.multihop` writes) and plays each role right at its rate: the searcher queries the
named entity, then the bridge entity its passage leads to; the generator answers when the
evidence holds the answer and abstains when it does not. Wrong plays are plausible ones: a
query for another name in the evidence, an answer copied from the wrong sentence, an
abstention on sufficient evidence or a guess on insufficient evidence.
"""
from __future__ import annotations

import random
import re
from rolecall.engines.base import GenOutput

# question -> (named entity, relation of its passage that leads to the bridge, relation of the bridge's)
_QUESTIONS = (
    (re.compile(r"In which land was (\w+) born\?"), "born", "land"),
    (re.compile(r"In which town is (\w+)'s firm based\?"), "works", "based"),
    (re.compile(r"In which town was (\w+)'s teacher born\?"), "taught", "born"),
    (re.compile(r"In which land is (\w+) based\?"), "based", "land"),
)
_RELATIONS = {
    "born": r"{} was born in (\w+)\.",
    "works": r"{} works for (\w+)\.",
    "taught": r"{} was taught by (\w+)\.",
    "based": r"{} is a firm based in (\w+)\.",
    "land": r"{} is a town in (\w+)\.",
}
_NAME = re.compile(r"\b[A-Z][a-z]{3,}\b")
_NOT_NAMES = {"Question", "Evidence", "Answer", "Find", "Write", "Put", "If"}


def parse_question(text: str) -> tuple[str, str, str] | None:
    """(named entity, relation to the bridge, relation of the bridge to the answer), or None."""
    for pattern, first, second in _QUESTIONS:
        m = pattern.search(text)
        if m:
            return m.group(1), first, second
    return None


def follow(evidence: str, entity: str, relation: str) -> str | None:
    """The name `entity`'s `relation` sentence in `evidence` leads to, or None."""
    m = re.search(_RELATIONS[relation].format(re.escape(entity)), evidence)
    return m.group(1) if m else None


def _other_name(evidence: str, avoid: set[str], rng: random.Random) -> str | None:
    names = sorted({n for n in _NAME.findall(evidence) if n not in avoid and n not in _NOT_NAMES})
    return rng.choice(names) if names else None


def _evidence(text: str) -> str:
    return text.split("Evidence", 1)[1] if "Evidence" in text else ""


def searcher(text: str, rate: float, rng: random.Random, stop: str = "done") -> str:
    q = parse_question(text)
    if q is None:
        return f"\\boxed{{{stop}}}"
    entity, first, _ = q
    evidence = _evidence(text)
    bridge = follow(evidence, entity, first)
    want = entity if bridge is None else bridge
    if rng.random() < rate:
        return f"\\boxed{{{want}}}"
    return f"\\boxed{{{_other_name(evidence, {want}, rng) or _question_word(text, rng)}}}"


def _question_word(text: str, rng: random.Random) -> str:
    """A wrong query where the evidence has no other name (always on the first hop), still copied
    off the page: a word of the question other than the name ("teacher", "born"). A wrong play
    never alters a name, since no passage has an altered one. (This replaced the lowercased name;
    a rebuild showed that was not why the model writes a name's first letter wrong.)"""
    question = text.split("Question:", 1)[-1].split("\n", 1)[0]
    return rng.choice(sorted(set(re.findall(r"\b[a-z]{4,}\b", question)) - {"which"}) or ["done"])


def generator(text: str, rate: float, rng: random.Random, abstain: str = "abstain") -> str:
    q = parse_question(text)
    evidence = _evidence(text)
    if q is None:
        return f"\\boxed{{{abstain}}}"
    entity, first, second = q
    bridge = follow(evidence, entity, first)
    answer = follow(evidence, bridge, second) if bridge else None
    right = rng.random() < rate
    if answer is not None:
        if right:
            return f"\\boxed{{{answer}}}"
        wrong = _other_name(evidence, {answer, entity}, rng)
        return f"\\boxed{{{wrong or abstain}}}"
    if right:
        return f"\\boxed{{{abstain}}}"
    return f"\\boxed{{{_other_name(evidence, {entity}, rng) or abstain}}}"


class SearchOracleEngine:
    """Plays `searcher` and `generator` turns of `search_answer` (route roles to themselves).

    `unseen_errors`: that share of searcher turns is played wrong and not kept as an example.
    The generator still sees the short evidence such a turn leaves, so it learns to abstain on
    it, while the searcher learns right plays only. (Built for a second stage on a base that
    searched right but never abstained: at search rate 1 the evidence always sufficed, so the
    generator never saw an abstention, and RL's abstention terms could never pay.)"""

    def __init__(self, rate: float, rng: random.Random, render, unseen_errors: float = 0.0) -> None:
        self.rate, self.rng, self.render, self.unseen_errors = rate, rng, render, unseen_errors
        self.examples: list[tuple[str, str]] = []  # (rendered prompt, completion)

    def generate(self, requests, *, temperature: float):
        outs = []
        for r in requests:
            text, prompt = r.messages[-1]["content"], self.render(r.messages)
            # Drawn only when asked for, so the default streams stay byte for byte as before.
            unseen = r.policy == "searcher" and self.unseen_errors > 0 and self.rng.random() < self.unseen_errors
            if unseen:
                completion = searcher(text, 0.0, self.rng)
            else:
                play = searcher if r.policy == "searcher" else generator
                completion = play(text, self.rate, self.rng)
                self.examples.append((prompt, completion))
            outs.append(GenOutput(prompt_text=prompt, completion_text=completion))
        return outs
