"""search_answer (DAC): the BM25 retriever and its cache, the built-in multi-hop task, and the
workflow's cross-agent rewards on a scripted engine, checked by hand."""
from __future__ import annotations

import asyncio
import json
import math
import os
import re
from collections import Counter

import pytest

from rolecall.testing import ScriptedEngine
from rolecall.retrieval import BM25Retriever, CorpusError, Passage, load_corpus, tokenize, write_corpus
from rolecall.rewards.verifier import QAVerifier
from rolecall.rollout import rollout
from rolecall.tasks.multihop import MultiHopTask
from rolecall.algo.credit import credit
from rolecall.algo.scoring import score
from rolecall.types import Problem
from rolecall.workflows import build_workflow, workflow_prompts

TEXTS = ["Zorvan was born in Telmora. Zorvan works for Brimco.",
         "Telmora is a town in Quessia.",
         "Brimco is a firm based in Darvel. Darvel is by the river.",
         "Darvel is a town in Quessia. The river floods in spring.",
         "Cats like fish and the river.",
         "Quessia is a land by the sea, the sea is cold, cold, cold."]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ROLECALL_CACHE", str(tmp_path / "cache"))


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.jsonl"
    write_corpus(path, [Passage(f"d{i}", "", t) for i, t in enumerate(TEXTS)])
    return path


def brute_bm25(docs: list[list[str]], query: list[str], k1=1.5, b=0.75) -> list[float]:
    """Lucene BM25 written out term by term, to check the package against."""
    n, avg = len(docs), sum(map(len, docs)) / len(docs)
    df = Counter(t for d in docs for t in set(d))
    out = []
    for d in docs:
        tf = Counter(d)
        s = 0.0
        for t in set(query):
            if tf[t]:
                idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                s += idf * tf[t] / (tf[t] + k1 * (1 - b + b * len(d) / avg))
        out.append(s)
    return out


@pytest.mark.parametrize("query", ["Where was Zorvan born?", "town Quessia", "river", "cold sea cold",
                                   "Darvel Brimco river spring", "nothing matches xyz", "the of a"])
def test_retriever_matches_brute_force_bm25(corpus, query):
    r = BM25Retriever.from_file(corpus)
    docs = [tokenize(t) for t in TEXTS]
    want = brute_bm25(docs, tokenize(query))
    ranked = sorted((i for i, s in enumerate(want) if s > 0), key=lambda i: (-want[i], i))[:3]
    got = r.top(query, 3)
    assert [p.id for p, _ in got] == [f"d{i}" for i in ranked]
    assert [s for _, s in got] == pytest.approx([want[i] for i in ranked], rel=1e-5)
    assert [p.id for p in asyncio.run(r.search(query, 3))] == [p.id for p, _ in got]


def test_index_is_cached_and_rebuilt_when_the_corpus_changes(corpus, monkeypatch):
    import bm25s

    BM25Retriever.from_file(corpus)
    assert (corpus.parent / "corpus.jsonl.bm25" / "fingerprint.json").is_file()
    built = []
    real_index = bm25s.BM25.index
    monkeypatch.setattr(bm25s.BM25, "index", lambda self, *a, **k: built.append(1) or real_index(self, *a, **k))
    assert BM25Retriever.from_file(corpus).top("Telmora", 1)[0][0].id == "d1"
    assert built == []  # read from the cache
    os.utime(corpus)  # touched, same bytes: the digest says it is the same corpus
    BM25Retriever.from_file(corpus)
    assert built == []
    with corpus.open("a") as f:
        f.write(json.dumps({"id": "new", "title": "Ulmo", "text": "Ulmo sings."}) + "\n")
    r = BM25Retriever.from_file(corpus)
    assert built == [1]
    assert r.top("Ulmo", 1)[0][0].id == "new"
    assert BM25Retriever.from_file(corpus, k1=1.2).top("Ulmo", 1)[0][0].id == "new"  # settings change: rebuilt
    assert built == [1, 1]


def test_unwritable_corpus_folder_caches_elsewhere(tmp_path, monkeypatch):
    import tempfile

    folder = tmp_path / "ro"
    folder.mkdir()
    write_corpus(folder / "c.jsonl", [Passage("a", "", "alpha beta")])
    real = tempfile.mkdtemp

    def refuse(*a, dir=None, **k):  # a read-only folder (root ignores chmod, so refuse it here)
        if dir is not None and os.path.samefile(dir, folder):
            raise PermissionError(13, "Permission denied", str(dir))
        return real(*a, dir=dir, **k)
    monkeypatch.setattr(tempfile, "mkdtemp", refuse)
    assert BM25Retriever.from_file(folder / "c.jsonl").top("alpha", 1)[0][0].id == "a"
    assert sorted(os.listdir(folder)) == ["c.jsonl"]
    (cached,) = (tmp_path / "cache" / "bm25").iterdir()
    assert (cached / "fingerprint.json").is_file()
    assert BM25Retriever.from_file(folder / "c.jsonl").top("beta", 1)[0][0].id == "a"  # read back from there


@pytest.mark.parametrize("line, says", [("{not json", "line 2: not JSON"), ('{"id": "x"}', "line 2: 'text'"),
                                        ('{"id": "a", "text": "dup"}', "id 'a' repeats line 1"),
                                        ('{"text": "t", "title": 3}', "'title' must be a string"),
                                        ("[1, 2]", "expected an object")])
def test_bad_corpus_lines_are_named(tmp_path, line, says):
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": "a", "text": "fine"}\n' + line + "\n")
    with pytest.raises(CorpusError, match=says):
        load_corpus(path)
    with pytest.raises(CorpusError, match="no such file"):
        load_corpus(tmp_path / "missing.jsonl")


def test_multihop_task_is_deterministic_answerable_and_split():
    a, b = MultiHopTask(people=20, n_val=10), MultiHopTask(people=20, n_val=10)
    assert a.train() == b.train() and a.validation() == b.validation()
    assert a.corpus_path == b.corpus_path and a.corpus_path.is_file()
    assert not {p.uid for p in a.train()} & {p.uid for p in a.validation()}
    passages = {p.id: p for p in load_corpus(a.corpus_path)}
    for p in a.train() + a.validation():
        first, bridge = (passages[i] for i in p.meta["support"])
        assert p.answer in bridge.text and bridge.title in first.text  # two hops: entity -> bridge -> answer
        assert p.meta["corpus"] == str(a.corpus_path)
    assert MultiHopTask(people=20, n_val=10, seed=1).train() != a.train()


# -- the workflow on a scripted engine ---------------------------------------------------------

Q = Problem("q1", "In which land is Brimco based?", "Quessia", {"answers": ["Quessia"]})


def script(queries, answer):
    """The searcher's first and second query (by what its prompt shows), the generator's answer;
    records the prompts seen."""
    seen = {"searcher": [], "generator": []}

    def reply(req):
        text = req.messages[-1]["content"]
        seen[req.policy].append(text)
        if req.policy == "searcher":
            return queries[0] if "(nothing yet)" in text else queries[1]
        return answer
    return reply, seen


def run(reply, *, options=None, problems=(Q,), training=False, group_size=1, corpus=None):
    opts = {"augment": 0.0, **({"corpus": str(corpus)} if corpus else {}), **(options or {})}
    wf = build_workflow("search_answer", workflow_prompts("search_answer", None), opts)
    eps = rollout(wf, list(problems), group_size, ScriptedEngine(reply), {r: r for r in wf.roles},
                  lambda r: 32, 0.7, training=training)
    verifier = QAVerifier()
    score(eps, verifier)
    metrics = credit(eps, wf)
    return eps, metrics


def rewards(ep):
    return [(t.slot, ep.turn_rewards[t.index]) for t in ep.turns]


def test_two_hops_then_a_right_answer(corpus):
    reply, seen = script(["\\boxed{Brimco}", "\\boxed{Darvel town}"], "\\boxed{Quessia}")
    (ep,), m = run(reply, corpus=corpus)
    assert ep.info["queries"] == ["Brimco", "Darvel town"]
    assert "Darvel is a town in Quessia" in seen["generator"][0] and "Brimco is a firm" in seen["generator"][0]
    assert "(nothing yet)" in seen["searcher"][0] and "Brimco is a firm" in seen["searcher"][1]
    assert ep.reward == 1.0 and ep.info["sufficient"] and not ep.info["abstained"]
    # generator: right = 1; searcher: c + 0.5 * s = 1.5
    assert rewards(ep) == [("searcher", 1.5), ("searcher", 1.5), ("generator", 1.0)]
    assert m["search_answer/em"] == 1.0 and m["search_answer/hops"] == 2.0 and m["search_answer/sufficiency_rate"] == 1.0


@pytest.mark.parametrize("queries, answer, suff, abst, gen, search", [
    (["\\boxed{cats}", "\\boxed{done}"], "\\boxed{abstain}", False, True, 0.5, -0.5),      # right to abstain
    (["\\boxed{Darvel}", "\\boxed{done}"], "\\boxed{abstain}", True, True, 0.0, 0.0),       # abstained on enough
    (["\\boxed{Darvel}", "\\boxed{done}"], "\\boxed{Telmora}", True, False, 0.0, 0.5),      # answered wrong
    (["\\boxed{cats}", "\\boxed{done}"], "no box at all", False, False, 0.0, 0.0),           # no answer = wrong
])
def test_cross_agent_rewards_by_hand(corpus, queries, answer, suff, abst, gen, search):
    reply, _ = script(queries, answer)
    (ep,), m = run(reply, corpus=corpus)
    assert (ep.info["sufficient"], ep.info["abstained"], ep.info["queries"]) == (suff, abst, [queries[0][7:-1]])
    # the turn that said "done" is a searcher turn too: it is paid like the others
    assert rewards(ep) == [("searcher", search), ("searcher", search), ("generator", gen)]
    assert m["search_answer/abstain_rate"] == float(abst)
    if abst:
        assert m["search_answer/abstain_precision"] == float(not suff)
    else:
        assert math.isnan(m["search_answer/abstain_precision"])


def test_ablation_switch_removes_both_abstention_terms(corpus):
    reply, _ = script(["\\boxed{cats}", "\\boxed{done}"], "\\boxed{abstain}")
    (ep,), _ = run(reply, corpus=corpus, options={"abstain_signal": False})
    assert rewards(ep) == [("searcher", 0.0), ("searcher", 0.0), ("generator", 0.0)]
    reply, _ = script(["\\boxed{Brimco}", "\\boxed{Darvel}"], "\\boxed{Quessia}")
    (ep,), _ = run(reply, corpus=corpus, options={"abstain_signal": False, "alpha": 0.9})
    assert rewards(ep) == [("searcher", 1.5), ("searcher", 1.5), ("generator", 1.0)]  # the rest unchanged


def test_coefficients_are_options(corpus):
    reply, _ = script(["\\boxed{Darvel}", "\\boxed{done}"], "\\boxed{abstain}")
    (ep,), _ = run(reply, corpus=corpus, options={"sufficiency_weight": 2.0, "abstain_penalty": 0.25})
    assert rewards(ep) == [("searcher", 2.0 - 0.25)] * 2 + [("generator", 0.0)]


def test_augmented_turn_only_in_training_with_sufficient_evidence(tmp_path):
    task = MultiHopTask(people=20, n_val=5)
    p = task.train()[0]
    seen = []

    def reply(req):
        seen.append((req.policy, req.messages[-1]["content"]))
        return "\\boxed{zzz}" if req.policy == "searcher" else "\\boxed{abstain}"
    (ep,), m = run(reply, problems=[p], options={"augment": 1.0}, training=True)
    assert [t.slot for t in ep.turns] == ["searcher", "searcher", "generator", "generator_aug"]
    aug_prompt = seen[-1][1]
    support = {q.id: q for q in load_corpus(task.corpus_path)}
    for pid in p.meta["support"]:
        assert support[pid].text in aug_prompt  # the hard positive is shown
    assert not ep.info["sufficient"]  # the searcher found nothing: the main turn was rightly abstaining
    r = dict((t.slot, ep.turn_rewards[t.index]) for t in ep.turns)
    assert r == {"searcher": -0.5, "generator": 0.5, "generator_aug": 0.0}  # abstaining on sufficient evidence pays 0
    assert m["search_answer/augmented_em"] == 0.0
    (ep,), _ = run(reply, problems=[p], options={"augment": 1.0}, training=False)
    assert [t.slot for t in ep.turns] == ["searcher", "searcher", "generator"]
    (ep,), _ = run(reply, problems=[p], options={"augment": 0.0}, training=True)
    assert [t.slot for t in ep.turns] == ["searcher", "searcher", "generator"]


def test_augmented_turn_right_answer_is_paid_and_final_answer_unchanged():
    task = MultiHopTask(people=20, n_val=5)
    p = task.train()[0]

    def reply(req):
        if req.policy == "searcher":
            return "\\boxed{zzz}"
        return f"\\boxed{{{p.answer}}}" if "[1]" in req.messages[-1]["content"] else "\\boxed{abstain}"
    (ep,), _ = run(reply, problems=[p], options={"augment": 1.0}, training=True)
    r = dict((t.slot, ep.turn_rewards[t.index]) for t in ep.turns)
    assert r["generator_aug"] == 1.0 and ep.reward == 0.0 and ep.final_answer == "\\boxed{abstain}"


def test_augment_rate_is_a_share_of_episodes():
    task = MultiHopTask(people=40, n_val=5)
    n = 0
    eps, _ = run(lambda req: "\\boxed{done}" if req.policy == "searcher" else "x", problems=task.train()[:60],
                 options={"augment": 0.3}, training=True)
    n = sum("augmented_turn" in ep.info for ep in eps)
    assert 8 <= n <= 30  # binomial(60, 0.3): mean 18


def test_stop_word_ends_the_search_and_every_episode_is_graded_per_problem_corpus():
    task = MultiHopTask(people=20, n_val=5)
    eps, m = run(lambda req: "\\boxed{done}" if req.policy == "searcher" else "\\boxed{abstain}",
                 problems=task.validation(), group_size=2)
    assert all(ep.info["queries"] == [] and [t.slot for t in ep.turns] == ["searcher", "generator"] for ep in eps)
    assert m["search_answer/hops"] == 0.0 and m["search_answer/abstain_precision"] == 1.0


def test_context_passages_of_a_hotpotqa_row():
    ctx = [{"id": "Zorvan", "title": "Zorvan", "text": "Zorvan was born in Telmora."},
           {"id": "Telmora", "title": "Telmora", "text": "Telmora is a town in Quessia."}]
    p = Problem("h1", "In which land was Zorvan born?", "Quessia", {"answers": ["Quessia"], "context": ctx,
                                                                   "support": ["Zorvan", "Telmora"]})
    reply, seen = script(["\\boxed{Zorvan}", "\\boxed{Telmora}"], "\\boxed{Quessia}")
    (ep,), _ = run(reply, problems=[p])
    assert ep.reward == 1.0 and ep.info["evidence"] == ["Zorvan", "Telmora"]


def test_a_problem_without_corpus_fails_naming_it():
    from rolecall.workflows import WorkflowError

    with pytest.raises(WorkflowError, match="problem 'q1' has no corpus"):
        run(lambda req: "\\boxed{x}", problems=[Q])


@pytest.mark.parametrize("options, says", [({"hops": 0}, "hops"), ({"augment": 1.5}, "augment"),
                                           ({"alpha": -1}, "alpha"), ({"abstain_signal": "no"}, "abstain_signal"),
                                           ({"abstain_word": "  "}, "abstain_word"),
                                           ({"corpus": "/nonexistent/corpus.jsonl"}, "corpus: no such file")])
def test_bad_options_are_named(options, says):
    with pytest.raises(ValueError, match=f"workflow.options.{says}"):
        build_workflow("search_answer", workflow_prompts("search_answer", None), options)


# -- HotpotQA rows -------------------------------------------------------------------------------

HOTPOT_ORIGINAL = {"_id": "h1", "question": "In which land was Zorvan born?", "answer": "Quessia", "type": "bridge",
                   "supporting_facts": [["Zorvan", 0], ["Telmora", 0]],
                   "context": [["Zorvan", ["Zorvan was born in Telmora.", " He sings."]],
                               ["Telmora", ["Telmora is a town in Quessia."]],
                               ["Cats", ["Cats like fish."]]]}
HOTPOT_DATASETS = {"id": "h2", "question": "In which land was Zorvan born?", "answer": "Quessia",
                   "supporting_facts": {"title": ["Zorvan", "Telmora"], "sent_id": [0, 0]},
                   "context": {"title": ["Zorvan", "Telmora", "Zorvan"],
                               "sentences": [["Zorvan was born in Telmora."], ["Telmora is a town in Quessia."],
                                             ["Zorvan is also a song."]]}}


def test_hotpotqa_rows_in_both_layouts_carry_their_passages(tmp_path):
    from rolecall.tasks.files import load_dataset

    path = tmp_path / "hotpot.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in (HOTPOT_ORIGINAL, HOTPOT_DATASETS)) + "\n")
    a, b = load_dataset(path, "qa").problems
    assert a.meta["context"][0] == {"id": "Zorvan", "title": "Zorvan", "text": "Zorvan was born in Telmora. He sings."}
    assert a.meta["support"] == ["Zorvan", "Telmora"] and b.meta["support"] == ["Zorvan", "Telmora"]
    assert [c["id"] for c in b.meta["context"]] == ["Zorvan", "Telmora", "Zorvan#2"]  # a repeated title stays apart
    reply, _ = script(["\\boxed{Zorvan born}", "\\boxed{Telmora}"], "\\boxed{Quessia}")
    eps, m = run(reply, problems=[a, b], options={"augment": 1.0}, training=True)
    assert [ep.reward for ep in eps] == [1.0, 1.0] and m["search_answer/sufficiency_rate"] == 1.0


def test_a_bad_context_is_a_bad_row(tmp_path):
    from rolecall.tasks.files import load_dataset

    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in (HOTPOT_DATASETS, {**HOTPOT_ORIGINAL, "context": [["Zorvan"]]})))
    loaded = load_dataset(path, "qa", on_bad_row="skip")
    assert len(loaded.problems) == 1
    assert str(loaded.report.issues[0]).startswith("row 1, field 'context': bad value (passage 0: expected")


def test_per_policy_learning_rates():
    from rolecall.config import load_config
    from rolecall.algo.optim import build_optimizers

    import torch

    cfg = load_config(None, ["workflow.name=search_answer", "task.name=multihop", "reward.name=qa", "optim.lr=0.002",
                             "policies={searcher: {optim: {lr: 0.0005}}, generator: {}}"])
    assert cfg.policy_optim()["searcher"].lr == 0.0005 and "generator" not in cfg.policy_optim()

    class Two(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(2, 2)
            self.b = torch.nn.Linear(2, 2)
    import rolecall.algo.optim as optim_mod

    model = Two()
    params = {"searcher": {"w": model.a.weight}, "generator": {"w": model.b.weight}}
    real = optim_mod.adapter_params
    optim_mod.adapter_params = lambda m, name: params[name]
    try:
        opts = build_optimizers(model, ("searcher", "generator"), cfg.optim, cfg.policy_optim())
    finally:
        optim_mod.adapter_params = real
    assert opts["searcher"].optimizer.param_groups[0]["lr"] == 0.0005
    assert opts["generator"].optimizer.param_groups[0]["lr"] == 0.002
    # warmup and decay scale each policy's own peak
    assert opts["searcher"].schedule.set(0.5) == pytest.approx(opts["generator"].schedule.set(0.5) / 4)


def test_multihop_needs_the_qa_verifier():
    from rolecall.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="multihop task is graded by 'qa'"):
        load_config(None, ["workflow.name=search_answer", "task.name=multihop"])


def test_the_pretraining_oracle_plays_both_roles():
    """make-base's oracle: perfect at rate 1 (both hops right, answer copied from the bridge
    passage), abstains when the evidence cannot answer, and makes plausible mistakes below 1."""
    import random

    from rolecall.basemodel.search_oracle import SearchOracleEngine, generator

    task = MultiHopTask(people=30, n_val=10, seed=7)
    wf = build_workflow("search_answer", workflow_prompts("search_answer", None), {"augment": 0.0})

    def play(rate):
        engine = SearchOracleEngine(rate, random.Random(0), lambda msgs: msgs[-1]["content"])
        eps = rollout(wf, task.train()[:40], 1, engine, {r: r for r in wf.roles}, lambda r: 0, 1.0)
        score(eps, QAVerifier())
        return credit(eps, wf), engine
    perfect, engine = play(1.0)
    assert perfect["search_answer/em"] == 1.0 and perfect["search_answer/sufficiency_rate"] == 1.0
    assert len(engine.examples) == 40 * 3
    noisy, _ = play(0.6)
    assert 0.1 < noisy["search_answer/em"] < 0.8 and noisy["search_answer/abstain_rate"] > 0
    _, wrong = play(0.0)  # every play wrong: each query is still a word of its prompt, written as there
    plays = [(p, c[len("\\boxed{"):-1]) for p, c in wrong.examples]
    plays = [(p, w) for p, w in plays if w not in ("abstain", "done")]
    assert plays and all(re.search(rf"\b{re.escape(w)}\b", p) for p, w in plays), plays[:3]
    assert generator("Question: In which land was Zorvan born?\nEvidence:\n[1] Zorvan: Zorvan was born in Telmora.",
                     1.0, random.Random(0)) == "\\boxed{abstain}"


def test_unseen_search_errors_teach_abstention_not_wrong_queries():
    """With unseen errors the oracle's searcher slips, but only its right plays are kept: every
    kept searcher turn queries the name the evidence leads to, while the generator's kept turns
    now abstain on the evidence the slips left short (at rate 1 with no slips it never does)."""
    import random

    from rolecall.basemodel.search_oracle import SearchOracleEngine, follow, parse_question

    task = MultiHopTask(people=30, n_val=10, seed=7)
    wf = build_workflow("search_answer", workflow_prompts("search_answer", None), {"augment": 0.0})

    def play(unseen):
        engine = SearchOracleEngine(1.0, random.Random(0), lambda msgs: msgs[-1]["content"], unseen)
        rollout(wf, task.train()[:60], 1, engine, {r: r for r in wf.roles}, lambda r: 0, 1.0)
        return engine.examples

    def kinds(examples):
        searches = [(p, c) for p, c in examples if "Find evidence" in p]
        answers = [c for p, c in examples if "Find evidence" not in p]
        return searches, answers

    clean_searches, clean_answers = kinds(play(0.0))
    assert "\\boxed{abstain}" not in clean_answers and len(clean_searches) == 120
    searches, answers = kinds(play(0.4))
    assert 0 < len(searches) < 120 and len(answers) == 60  # slips dropped; every generator turn kept
    assert 5 <= answers.count("\\boxed{abstain}") < 60
    for prompt, said in searches:
        entity, first, _ = parse_question(prompt.split("Question: ", 1)[1].split("\n", 1)[0])
        want = follow(prompt.split("Evidence so far:", 1)[1], entity, first) or entity
        assert said == f"\\boxed{{{want}}}"


@pytest.mark.parametrize("estimator", ["grpo", "agentwise", "turnwise", "drgrpo", "rloo", "softrank"])
def test_every_estimator_trains_search_answer(estimator):
    """Scripted episodes with mixed outcomes through every estimator: one finite advantage per
    turn, nonzero where a group's rewards differ (the augmented turns form their own slot)."""
    from itertools import count

    from rolecall.algo.credit import advantages
    task = MultiHopTask(people=20, n_val=5)
    calls = count()

    def reply(req):
        if req.policy == "searcher":
            return "\\boxed{done}"
        return "\\boxed{abstain}" if next(calls) % 3 else "\\boxed{Nowhere}"
    eps, _ = run(reply, problems=task.train()[:3], group_size=4, options={"augment": 0.5}, training=True)
    turns, adv, m = advantages(eps, estimator, None)
    assert len(adv) == len(turns) == sum(len(ep.turns) for ep in eps)
    assert all(math.isfinite(a) for a in adv) and any(a != 0 for a in adv), m


def test_eval_output_is_strict_json():
    from rolecall.cli import json_safe

    out = json.dumps(json_safe({"val/accuracy": 0.5, "val/search_answer/abstain_precision": float("nan"),
                                "x": float("inf"), "checkpoint": None}))
    assert json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in output")) == {
        "val/accuracy": 0.5, "val/search_answer/abstain_precision": None, "x": None, "checkpoint": None}


def test_default_generator_reward_never_pays_abstaining_on_sufficient_evidence_over_answering():
    # The collapse's cause: with a wrong-answer penalty w, a generator right with probability
    # p < w / (1 + w) earns most by abstaining everywhere. The default has no such term (the
    # seed's form), so answering sufficient evidence is never worth less than abstaining on it.
    from rolecall.workflows.search_answer import SearchAnswer, dac_rewards
    wf = SearchAnswer()
    coef = dict(alpha=wf.alpha, wrong_penalty=wf.wrong_penalty, sufficiency_weight=wf.sufficiency_weight,
                abstain_penalty=wf.abstain_penalty)
    wrong, _ = dac_rewards(0.0, False, True, **coef)
    abstain, _ = dac_rewards(0.0, True, True, **coef)
    assert wrong >= abstain
    # ...and a penalty brings the collapse back for a generator right a quarter of the time
    pen = {**coef, "wrong_penalty": 0.5}
    answer_value = 0.25 * dac_rewards(1.0, False, True, **pen)[0] + 0.75 * dac_rewards(0.0, False, True, **pen)[0]
    assert answer_value < dac_rewards(0.0, True, True, **pen)[0]
    # on evidence that cannot answer, abstaining still wins
    assert dac_rewards(0.0, True, False, **coef)[0] > dac_rewards(0.0, False, False, **coef)[0]


@pytest.mark.parametrize("reply, abstained", [
    ("unknown", True), ("Unknown. The evidence does not say.", True), ("The answer is unknown.", True),
    ("unknown\n\nVefe is not in the evidence.", True), ("\\boxed{unknown}", True),
    ("Leba", False), ("Leba, not unknown", False), ("I do not know", False), ("unknowns", False),
    ("\\boxed{Leba} unknown", False),  # a box is the answer
])
def test_plain_abstention_is_the_abstain_word_leading_the_answer(reply, abstained):
    from rolecall.workflows.search_answer import SearchAnswer
    assert SearchAnswer(abstain_word="unknown", role_format="plain").abstained(reply) is abstained
    # under the paper's boxed format only the box counts
    assert SearchAnswer(abstain_word="unknown").abstained(reply) is (reply == "\\boxed{unknown}")


def test_plain_searcher_query_is_the_whole_reply(corpus):
    from rolecall.workflows.search_answer import parse_query
    assert parse_query("Query: Brimco\nfirm town", "plain") == "Brimco firm town"
    assert parse_query("Brimco\nDarvel town") == "Darvel town"  # boxed format: the last line
    assert parse_query("look for \\boxed{Brimco}", "plain") == "Brimco"
    reply, seen = script(["Brimco: a firm", "Search query: Darvel town"], "The answer is Quessia")
    (ep,), m = run(reply, corpus=corpus, options={"role_format": "plain", "abstain_word": "unknown"})
    assert ep.info["queries"] == ["Brimco: a firm", "Darvel town"] and ep.info["sufficient"]
    assert not ep.info["abstained"]
    with pytest.raises(ValueError, match="workflow.options.role_format"):
        build_workflow("search_answer", workflow_prompts("search_answer", None), {"role_format": "words"})
