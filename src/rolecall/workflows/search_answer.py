"""`search_answer` (DAC): a searcher gathers evidence, a generator answers from it or abstains.

From "Divide and Cooperate: Role-Decomposed Multi-Agent LLM Training with Cross-Agent
Learning Signals". Up to `hops` times the searcher writes a query (`\\boxed{query}`, or
`\\boxed{done}` to stop early) and gets the `top_k` BM25 passages for it; the generator then
reads the question and every passage found and answers in `\\boxed{}` or abstains with
`\\boxed{abstain}`. The final answer is the generator's.

The corpus: the `corpus` option (a JSONL file of `{id, title, text}`), else the problem's
`meta["corpus"]` (the built-in multihop task sets it), else the problem's own `context`
passages (HotpotQA's distractor setting).

The seed's checks: the answer is correct when it matches a gold answer exactly after
normalisation (the run's `qa` verifier, EM); the evidence is sufficient when any passage
found contains a gold answer as an exact string (after the same normalisation, on word
boundaries). With c = correct (the verifier's score in [0, 1]: 0 or 1 under EM, a token F1
under `reward.qa_metric: f1`), a = abstained, s = sufficient, the cross-agent rewards are

    generator  R_g = c - wrong_penalty * (1 - c)   if it answered (1 when right and
                                       -wrong_penalty when wrong under EM; no answer is wrong)
                     alpha * (1 - s)   if it abstained: paid for abstaining on evidence that
                                       cannot answer, nothing for abstaining on evidence that can
    searcher   R_s = c + sufficiency_weight * s - abstain_penalty * a   (every searcher turn)

The seed gives the terms (generator: answer correctness and abstaining on insufficient
evidence weighted by alpha; searcher: answer correctness and evidence sufficiency,
penalised when the generator abstains) but not one formula; this is rolecall's form,
every coefficient an option. `abstain_signal: false` is the seed's falsification test:
both abstention terms (alpha and abstain_penalty) are removed, nothing else changes.

Why `wrong_penalty` defaults to 0 (the seed's generator reward has no wrong-answer term):
with a penalty w, answering on sufficient evidence is worth p - (1 - p) w to a generator
right with probability p, and abstaining 0, so a generator below p = w / (1 + w) (1/3 at
w = 0.5, every small model at its start) earns most by abstaining everywhere: the collapse
to abstention is that reward's optimum, not an accident of training. At w = 0 answering
never loses to abstaining where the evidence suffices, and abstaining wins only where it
does not (alpha > 0). A second cause is the estimator: GRPO divides each group's rewards by
their spread, so in a group where some abstain on poor evidence and the rest answer wrong
the push toward abstaining is as large for alpha = 0.01 as for alpha = 1; the seed's
threshold (alpha against the reward for answering hard but sufficient evidence) only holds
where rewards keep their scale, as a mean-only estimator (`algo.estimator: drgrpo`) keeps
them. docs/search_answer.md has the measurements.

`role_format: plain` (a deviation from the paper, for small models that never box): a
searcher's query is its whole reply (a box if it wrote one, a leading `Query:` dropped), and
the generator abstained when its final answer (its box, else its last line, an `Answer:` /
`The answer is` prefix dropped) or its first line begins with the abstain word (`unknown`,
`Unknown. The evidence does not say.`). Pair it with `reward.answer_from: boxed_or_last_line`,
which grades that same last line.

Hard-positive augmentation (`augment`, a rate): in training episodes only, that share of
episodes adds a second generator turn (slot `generator_aug`) on evidence that is sufficient
by construction, the problem's support passages (`meta["support"]` ids, else passages
containing the answer) shuffled among the passages the searcher found and the question's
own top hits. It is rewarded as an answer is (1 when right, -wrong_penalty when wrong under
EM), 0 when it abstains, and does not change the final answer.
"""
from __future__ import annotations

import hashlib
import os
import re
from collections import OrderedDict
from importlib import resources
from statistics import fmean

import yaml

from rolecall.parsing import final_answer, last_boxed, strip_think
from rolecall.retrieval import BM25Retriever, Passage
from rolecall.retrieval.corpus import passage_from_row
from rolecall.rewards.qa import gold_answers, normalize_answer
from rolecall.types import Demonstration, Episode, Problem
from rolecall.workflows.base import Team, Workflow, positive_int_option, role_format_option, user

SEARCH_PROMPTS = yaml.safe_load(resources.files("rolecall.workflows").joinpath("prompts/search.yaml").read_text("utf-8"))
_MAX_QUERY_CHARS = 200
_QUERY_PREFIX = re.compile(r"^\W*(?:search\s+)?query\s*[:=]\s*", re.IGNORECASE)


class SearchAnswer(Workflow):
    name = "search_answer"
    roles = ("searcher", "generator")
    answering_roles = ("generator",)  # the searcher only retrieves
    templates = {"searcher": ("question", "evidence", "stop"), "generator": ("question", "evidence", "abstain")}

    def __init__(self, prompts=SEARCH_PROMPTS, hops: int = 2, top_k: int = 3, corpus: str | None = None,
                 alpha: float = 0.5, wrong_penalty: float = 0.0, sufficiency_weight: float = 0.5,
                 abstain_penalty: float = 0.5, abstain_signal: bool = True, augment: float = 0.25,
                 abstain_word: str = "abstain", stop_word: str = "done", role_format: str = "boxed") -> None:
        self.hops, self.top_k = positive_int_option("hops", hops), positive_int_option("top_k", top_k)
        for name, value in (("alpha", alpha), ("wrong_penalty", wrong_penalty),
                            ("sufficiency_weight", sufficiency_weight), ("abstain_penalty", abstain_penalty)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"workflow.options.{name}: must be a number >= 0, got {value!r}")
        if isinstance(augment, bool) or not isinstance(augment, (int, float)) or not 0 <= augment <= 1:
            raise ValueError(f"workflow.options.augment: must be a rate in [0, 1], got {augment!r}")
        if not isinstance(abstain_signal, bool):
            raise ValueError(f"workflow.options.abstain_signal: must be true or false, got {abstain_signal!r}")
        for name, word in (("abstain_word", abstain_word), ("stop_word", stop_word)):
            if not isinstance(word, str) or not normalize_answer(word):
                raise ValueError(f"workflow.options.{name}: must be a word, got {word!r}")
        if corpus is not None and not isinstance(corpus, str):
            raise ValueError(f"workflow.options.corpus: must be the path of a JSONL corpus, got {corpus!r}")
        if corpus is not None and not os.path.isfile(corpus):  # checked at config load, not mid-run
            raise ValueError(f"workflow.options.corpus: no such file {corpus!r} (a JSONL file of {{id, title, text}})")
        self.corpus = corpus
        self.alpha = float(alpha) if abstain_signal else 0.0
        self.abstain_penalty = float(abstain_penalty) if abstain_signal else 0.0
        self.wrong_penalty, self.sufficiency_weight = float(wrong_penalty), float(sufficiency_weight)
        self.augment, self.abstain_word, self.stop_word = float(augment), abstain_word, stop_word
        self.role_format = role_format_option(role_format)
        self._files: dict[str, BM25Retriever] = {}
        self._contexts: OrderedDict[str, BM25Retriever] = OrderedDict()
        super().__init__(prompts)

    # -- the episode -------------------------------------------------------------------------

    async def run(self, problem: Problem, team: Team) -> str:
        retriever = self.retriever(problem)
        found: dict[str, Passage] = {}
        queries: list[str] = []
        for _ in range(self.hops):
            reply = await team.call("searcher", [user(self.render(
                "searcher", question=problem.prompt, evidence=self.show(found.values(), "(nothing yet)"),
                stop=self.stop_word))])
            query = parse_query(reply, self.role_format)
            if not query or normalize_answer(query) == normalize_answer(self.stop_word):
                break
            queries.append(query)
            for p in await retriever.search(query, self.top_k):
                found.setdefault(p.id, p)
        evidence = list(found.values())
        answer = await team.call("generator", [user(self.render(
            "generator", question=problem.prompt, evidence=self.show(evidence, "(no passages found)"),
            abstain=self.abstain_word))])
        golds = gold_answers(problem.meta, problem.answer)
        team.info.update(queries=queries, evidence=[p.id for p in evidence], generator_turn=answer.turn,
                         sufficient=sufficient(evidence, golds), abstained=self.abstained(answer))
        if getattr(team, "training", False) and self.augment and _draw(problem, queries) < self.augment:
            shown = await self.hard_positive(problem, golds, retriever, evidence, queries)
            if shown:
                aug = await team.call("generator", [user(self.render(
                    "generator", question=problem.prompt, evidence=self.show(shown, ""),
                    abstain=self.abstain_word))], slot="generator_aug")
                team.grade(aug, "augmented")
                team.info.update(augmented_turn=aug.turn, augmented_abstained=self.abstained(aug))
        return answer

    async def demonstrations(self, problem: Problem) -> list[Demonstration]:
        """Both roles played right, from the problem's support passages (`meta["support"]`, in hop
        order). The searcher: each hop's query is the next support passage's title, shown the
        passages the earlier queries found (then the stop word, if hops remain). The generator,
        both of its plays: the gold answer from the hard-positive evidence (the support passages
        among as many distractors as a full search finds), and the abstain word from as many of
        the question's own hits as hold no gold answer. How often to abstain is left to RL (with
        the abstention signal or without it: the seed's question); a generator that never
        abstains gives that signal nothing to act on."""
        golds = gold_answers(problem.meta, problem.answer)
        retriever = self.retriever(problem)
        out = await self._searcher_demonstrations(problem, retriever)
        if not golds:
            return out
        shown = await self.hard_positive(problem, golds, retriever, [], [])
        size = self.hops * self.top_k
        short = [p for p in await retriever.search(problem.prompt, 2 * size) if not sufficient([p], golds)][:size]
        for evidence, reply in ((shown, golds[0]), (short, self.abstain_word)):
            if evidence:
                out.append(Demonstration("generator", [user(self.render(
                    "generator", question=problem.prompt, evidence=self.show(evidence, ""),
                    abstain=self.abstain_word))], self._written(reply)))
        return out

    async def _searcher_demonstrations(self, problem: Problem, retriever: BM25Retriever) -> list[Demonstration]:
        by_id = {p.id: p for p in retriever.passages}
        titles = [by_id[i].title for i in problem.meta.get("support", ()) if i in by_id and by_id[i].title]
        if not titles:
            return []
        found: dict[str, Passage] = {}
        out = []
        for query in [*titles, self.stop_word][:self.hops]:  # the stop word once the support is found
            prompt = self.render("searcher", question=problem.prompt,
                                 evidence=self.show(found.values(), "(nothing yet)"), stop=self.stop_word)
            out.append(Demonstration("searcher", [user(prompt)], self._written(query)))
            if query == self.stop_word:
                break
            for p in await retriever.search(query, self.top_k):
                found.setdefault(p.id, p)
        return out

    def _written(self, reply: str) -> str:
        """A demonstrated reply as the role is asked to write it: bare, or in `\\boxed{}`."""
        return reply if self.role_format == "plain" else f"\\boxed{{{reply}}}"

    def retriever(self, problem: Problem) -> BM25Retriever:
        path = self.corpus or problem.meta.get("corpus")
        if path:
            if path not in self._files:
                self._files[path] = BM25Retriever.from_file(path)
            return self._files[path]
        context = problem.meta.get("context")
        if not context:
            raise ValueError(f"problem {problem.uid!r} has no corpus: set workflow.options.corpus to a JSONL file of "
                             "{id, title, text}, or give the rows a `context` of passages")
        if problem.uid not in self._contexts:
            passages = [passage_from_row(row, default_id=str(i), where=f"problem {problem.uid!r}, context passage {i}")
                        for i, row in enumerate(context)]
            self._contexts[problem.uid] = BM25Retriever(passages)
            if len(self._contexts) > 4096:  # a per-problem index is cheap to rebuild; memory is not free
                self._contexts.popitem(last=False)
        return self._contexts[problem.uid]

    async def hard_positive(self, problem: Problem, golds: list[str], retriever: BM25Retriever,
                            evidence: list[Passage], queries: list[str]) -> list[Passage]:
        """Support passages among distractors, as many passages as a full search finds."""
        by_id = {p.id: p for p in retriever.passages}
        support = [by_id[i] for i in problem.meta.get("support", ()) if i in by_id]
        if not sufficient(support, golds):
            hits = await retriever.search(" ".join([problem.prompt, *golds]), self.top_k)
            support = [p for p in hits if sufficient([p], golds)][:1]
        if not support:
            return []  # the corpus cannot answer this question: nothing to augment with
        size = max(self.hops * self.top_k, len(support) + 1)
        support_ids = {s.id for s in support}
        distractors = [p for p in [*evidence, *await retriever.search(problem.prompt, size)]
                       if p.id not in support_ids and not sufficient([p], golds)]
        shown = list({p.id: p for p in [*support, *distractors]}.values())[:max(size, len(support))]
        order = sorted(range(len(shown)), key=lambda i: hashlib.sha256(f"{problem.uid}|{queries}|{i}".encode()).digest())
        return [shown[i] for i in order]

    def show(self, passages, empty: str) -> str:
        lines = [f"[{i}] {p.render()}" for i, p in enumerate(passages, 1)]
        return "\n".join(lines) if lines else empty

    def abstained(self, text: str) -> bool:
        """`\\boxed{abstain}`; under `role_format: plain` also a final answer or first line that
        begins with the abstain word (the module docstring)."""
        word = normalize_answer(self.abstain_word)
        text = strip_think(text)
        boxed = last_boxed(text)
        if boxed is not None or self.role_format != "plain":
            return boxed is not None and normalize_answer(boxed) == word
        lines = [line for line in text.splitlines() if line.strip()]
        said = [final_answer(text, "boxed_or_last_line").text or "", lines[0] if lines else ""]
        return any(f"{normalize_answer(s)} ".startswith(f"{word} ") for s in said)

    # -- credit --------------------------------------------------------------------------------

    def turn_rewards(self, episode: Episode) -> dict[int, float | None] | None:
        if "generator_turn" not in episode.info:
            return None  # cut by the time budget before the generator answered: outcome for all
        correct = episode.reward
        info = episode.info
        gen, search = dac_rewards(correct, info["abstained"], info["sufficient"], alpha=self.alpha,
                                  wrong_penalty=self.wrong_penalty, sufficiency_weight=self.sufficiency_weight,
                                  abstain_penalty=self.abstain_penalty)
        out: dict[int, float | None] = {t.index: search for t in episode.turns if t.role == "searcher"}
        out[info["generator_turn"]] = gen
        if "augmented_turn" in info:
            grade = (episode.grades("augmented") or [None])[0]
            out[info["augmented_turn"]] = (None if grade is None else 0.0 if info["augmented_abstained"]
                                           else answered_reward(grade, self.wrong_penalty))
        return out

    def metrics(self, episodes: list[Episode]) -> dict[str, float]:
        done = [ep for ep in episodes if "generator_turn" in ep.info and ep.reward is not None]
        if not done:
            return {}
        abstained = [ep for ep in done if ep.info["abstained"]]
        enough = [ep for ep in done if ep.info["sufficient"]]
        augmented = [g for ep in done for g in ep.grades("augmented") if g is not None]
        nan = float("nan")
        return {
            "search_answer/em": fmean(_em(ep) for ep in done),
            "search_answer/f1": fmean(float(ep.verdict.get("f1", ep.reward)) for ep in done),
            "search_answer/abstain_rate": len(abstained) / len(done),
            "search_answer/abstain_precision": fmean(not ep.info["sufficient"] for ep in abstained) if abstained else nan,
            "search_answer/sufficiency_rate": len(enough) / len(done),
            "search_answer/em_when_sufficient": fmean(_em(ep) for ep in enough) if enough else nan,
            "search_answer/hops": fmean(len(ep.info["queries"]) for ep in done),
            **({"search_answer/augmented_em": fmean(g >= 1.0 for g in augmented)} if augmented else {}),
        }


def dac_rewards(correct: float | None, abstained: bool, sufficient_: bool, *, alpha: float, wrong_penalty: float,
                sufficiency_weight: float, abstain_penalty: float) -> tuple[float | None, float | None]:
    """(generator, searcher) rewards of the module docstring; None for both when unscorable."""
    if correct is None:
        return None, None
    c = min(max(float(correct), 0.0), 1.0)
    if abstained:
        gen = 0.0 if sufficient_ else alpha
    else:
        gen = answered_reward(c, wrong_penalty)
    search = c + sufficiency_weight * float(sufficient_) - abstain_penalty * float(abstained)
    return gen, search


def answered_reward(c: float, wrong_penalty: float) -> float:
    """The generator's reward for an answer graded c in [0, 1]: c - wrong_penalty * (1 - c), so 1
    when right and -wrong_penalty when wrong under exact match, and between them for a token F1
    (`reward.qa_metric: f1`: partial credit, the signal a generator that names the right entity
    in a sentence gets before it answers exactly)."""
    c = min(max(float(c), 0.0), 1.0)
    return c - wrong_penalty * (1.0 - c)


def _em(ep: Episode) -> float:
    """Exact match, under either qa metric (the verifier records it beside an F1 score)."""
    return float((ep.verdict or {}).get("em", ep.reward >= 1.0))


def sufficient(passages, golds: list[str]) -> bool:
    """Some passage contains some gold answer as an exact string (normalised, on word boundaries)."""
    wanted = [f" {g} " for g in map(normalize_answer, golds) if g]
    return any(w in f" {normalize_answer(p.render())} " for p in passages for w in wanted)


def parse_query(reply: str, role_format: str = "boxed") -> str:
    """The query a searcher wrote: its last `\\boxed{}`, else its last non-empty line (under
    `role_format: plain`, its whole reply, a leading `Query:` dropped)."""
    text = strip_think(reply)
    boxed = last_boxed(text)
    if boxed is None and role_format == "plain":
        boxed = _QUERY_PREFIX.sub("", " ".join(text.split()))
    elif boxed is None:
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        boxed = lines[-1] if lines else ""
    return boxed[:_MAX_QUERY_CHARS].strip()


def _draw(problem: Problem, queries: list[str]) -> float:
    """A uniform draw in [0, 1) fixed by the episode's content, so a resumed step redraws the same."""
    digest = hashlib.sha256(f"augment|{problem.uid}|{queries}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64
