"""Built-in multi-hop QA: facts about invented people, towns, lands and firms, 2-hop questions.

Every entity has one passage (title = its name) stating its facts, so a question needs two
searches: one for the entity it names, one for the entity that passage leads to (the
bridge). Names are made from syllables, so no pretrained knowledge can answer them; the
corpus is the only source. Questions, each with its gold answer and its two support passages:

- "In which land was <person> born?"         person -> town (born in) -> land
- "In which town is <person>'s firm based?"  person -> firm (works for) -> town
- "In which town was <person>'s teacher born?" person -> teacher (taught by) -> town
- "In which land is <firm> based?"           firm -> town (based in) -> land

The corpus is written once to rolecall's cache folder (`$ROLECALL_CACHE`, else
`~/.cache/rolecall`) as JSONL `{id, title, text}`, named by its settings and content, so the
search index is built once too. The train/validation split is a seeded shuffle of all
questions: validation questions are never trained on, though they share the corpus.
"""
from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from rolecall.paths import cache_dir
from rolecall.retrieval.corpus import Passage, write_corpus
from rolecall.tasks.source import TaskSource
from rolecall.types import Problem

GENERATOR_VERSION = 1  # part of the corpus file name: a change here writes a new corpus
_ONSETS = "b d f g k l m n p r s t v z br dr gr kr pl tr st".split()
_VOWELS = "a e i o u".split()
_CODAS = ["", "", "n", "r", "l", "s", "th"]


@dataclass(frozen=True)
class MultiHopTask:
    people: int = 240
    towns: int = 40
    lands: int = 8
    firms: int = 40
    n_val: int = 200
    seed: int = 1234

    def __post_init__(self) -> None:
        for name in ("people", "towns", "lands", "firms"):
            if getattr(self, name) < 2:
                raise ValueError(f"task.{name} must be >= 2, got {getattr(self, name)}")
        if self.n_val < 1:
            raise ValueError(f"task.n_val must be >= 1, got {self.n_val}")

    @cached_property
    def _world(self) -> tuple[list[Passage], list[Problem]]:
        rng = random.Random(self.seed)
        count = self.people + self.towns + self.lands + self.firms
        names = invent_names(rng, count)
        people, towns = names[:self.people], names[self.people:self.people + self.towns]
        lands = names[self.people + self.towns:self.people + self.towns + self.lands]
        firms = names[self.people + self.towns + self.lands:]
        land_of = {t: rng.choice(lands) for t in towns}
        base_of = {f: rng.choice(towns) for f in firms}
        born = {p: rng.choice(towns) for p in people}
        works = {p: rng.choice(firms) for p in people}
        teacher = {p: rng.choice([q for q in people if q != p]) for p in people}

        passages = [Passage(f"land:{k}", k, f"{k} is a land by the sea.") for k in lands]
        passages += [Passage(f"town:{t}", t, f"{t} is a town in {land_of[t]}.") for t in towns]
        passages += [Passage(f"firm:{f}", f, f"{f} is a firm based in {base_of[f]}.") for f in firms]
        passages += [Passage(f"person:{p}", p, f"{p} was born in {born[p]}. {p} works for {works[p]}. "
                             f"{p} was taught by {teacher[p]}.") for p in people]
        problems = []
        for p in people:
            problems += [
                _q(f"In which land was {p} born?", land_of[born[p]], f"person:{p}", f"town:{born[p]}"),
                _q(f"In which town is {p}'s firm based?", base_of[works[p]], f"person:{p}", f"firm:{works[p]}"),
                _q(f"In which town was {p}'s teacher born?", born[teacher[p]], f"person:{p}",
                   f"person:{teacher[p]}"),
            ]
        problems += [_q(f"In which land is {f} based?", land_of[base_of[f]], f"firm:{f}", f"town:{base_of[f]}")
                     for f in firms]
        rng.shuffle(problems)
        if len(problems) <= self.n_val:
            raise ValueError(f"task.n_val={self.n_val} leaves no training questions ({len(problems)} in all)")
        return passages, problems

    @property
    def questions(self) -> list[Problem]:
        """Every question of the world, shuffled, without a corpus file (see train/validation)."""
        return self._world[1]

    @property
    def passages(self) -> list[Passage]:
        """The world's corpus: one passage per entity."""
        return self._world[0]

    @cached_property
    def corpus_path(self) -> Path:
        """The corpus file, written on first use (atomically; identical settings share it)."""
        passages = self.passages
        body = "".join(json.dumps([p.id, p.title, p.text]) for p in passages).encode()
        path = cache_dir("corpora", f"multihop-v{GENERATOR_VERSION}-{hashlib.sha256(body).hexdigest()[:12]}.jsonl")
        if not path.is_file():
            write_corpus(path, passages)
        return path

    def _with_corpus(self, problems: list[Problem]) -> list[Problem]:
        corpus = str(self.corpus_path)
        return [Problem(p.uid, p.prompt, p.answer, {**p.meta, "corpus": corpus}) for p in problems]

    def validation(self) -> list[Problem]:
        return self._with_corpus(self._world[1][: self.n_val])

    def train(self) -> list[Problem]:
        return self._with_corpus(self._world[1][self.n_val:])


def _q(question: str, answer: str, first: str, bridge: str) -> Problem:
    uid = hashlib.sha256(question.encode()).hexdigest()[:12]
    return Problem(uid=uid, prompt=question, answer=answer,
                   meta={"kind": "qa", "answers": [answer], "support": [first, bridge]})


def invent_names(rng: random.Random, n: int) -> list[str]:
    """n distinct two-syllable names, none an English stop word or a word of the templates."""
    taken = {"land", "town", "firm", "sea", "born", "works", "taught", "based", "teacher"}
    out: list[str] = []
    while len(out) < n:
        name = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(2))
        if name not in taken and len(name) >= 4:
            taken.add(name)
            out.append(name.capitalize())
    return out


def _problems(cfg, count_tokens=None, log=print):
    t = cfg.task
    task = MultiHopTask(people=t.people, n_val=t.n_val, seed=t.seed)
    return task.train(), task.validation()


def _identity(cfg) -> dict:
    t = cfg.task
    return {"path": "built-in", "task": f"multihop people={t.people} n_val={t.n_val} seed={t.seed}"}


TASK = TaskSource("multihop", _problems, _identity, reward="qa")
