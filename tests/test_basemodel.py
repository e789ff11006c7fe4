"""The embedded model's pretraining data: packed facts teach sums, copying the most common
listed answer, and verdict stamps; the oracle transcripts play every shipped workflow."""
from __future__ import annotations

import random
import re

from rolecall.basemodel.make import COPY_FACTS, PRETRAINED, _fact
from rolecall.basemodel.transcripts import OracleEngine, OracleRates
from rolecall.parsing import first_verdict, last_boxed
from rolecall.rollout import rollout
from rolecall.tasks.arithmetic import ArithmeticTask
from rolecall.workflows import build_workflow, load_prompts


def test_packed_facts_are_right_and_mixed_in_the_set_shares():
    train = ArithmeticTask().train()
    rng = random.Random(0)
    kinds = {"sum": 0, "verdict": 0, "copy": 0}
    for _ in range(3000):
        p = train[rng.randrange(len(train))]
        q, a = _fact(p, rng)
        if q.endswith("="):
            kinds["sum"] += 1
            assert a == f"{p.answer}\n"
        elif q.startswith("1: "):
            kinds["copy"] += 1
            listed = re.findall(r"\\boxed\{(\d+)\}", q)
            assert len(listed) == 3
            assert last_boxed(a) == max(listed, key=listed.count)  # the most common, ties to the first
        else:
            kinds["verdict"] += 1
            said = last_boxed(q)
            assert first_verdict(a) is (said == p.answer)
    for kind in ("verdict", "copy"):
        assert abs(kinds[kind] / 3000 - COPY_FACTS) < 0.03


def test_the_oracle_plays_every_shipped_workflow():
    """Each workflow's turns come out in the shape training will see (the evaluator's follow-up
    turns included): verdict stamps, strategy lists, boxed answers and picks."""
    rng = random.Random(0)
    engine = OracleEngine(OracleRates(), rng, lambda msgs: "\n".join(m["content"] for m in msgs))
    train = ArithmeticTask().train()
    for name in sorted({n for n, _, _ in PRETRAINED}):  # the arithmetic workflows make-base plays
        wf = build_workflow(name, load_prompts("math"), {})
        eps = rollout(wf, train[:20], 1, engine, {r: r for r in wf.roles}, lambda r: 0, 1.0)
        for ep in eps:
            for t in ep.turns:
                if t.role == "evaluator":
                    assert first_verdict(t.completion_text) is not None
                elif t.role == "orchestrator":
                    assert t.completion_text.startswith("1. ")
                else:
                    assert last_boxed(t.completion_text) is not None
    assert engine.examples


def test_copy_drills_grade_only_the_second_writing_of_fresh_names():
    from rolecall.basemodel.make import copy_drill
    from rolecall.basemodel.tokenizer import build_tokenizer

    tok, rng = build_tokenizer(), random.Random(0)
    seen = set()
    for _ in range(50):
        ids, mask = copy_drill(rng, tok)
        assert len(ids) == len(mask)
        text = tok.decode(ids)
        graded = "".join(tok.decode([i]) for i, m in zip(ids, mask) if m)
        lines = text.splitlines()
        assert len(lines) == 4 and graded == "".join(line.split(" | ")[1] + "\n" for line in lines)
        for line in lines:
            first, again = line.split(" | ")
            assert first == again and 1 <= len(first.split()) <= 4
            seen.update(first.split())
    assert len(seen) > 400  # drawn afresh, not a fixed list the model could memorise


def test_name_facts_ask_for_a_name_that_is_on_the_page_and_right():
    """Each fact's graded name is written in its prompt, and is what the oracle's reading of the
    passages gives: the named entity, the bridge, or the answer."""
    from rolecall.basemodel.make import name_fact
    from rolecall.basemodel.search_oracle import follow, parse_question
    from rolecall.basemodel.tokenizer import build_tokenizer

    tok, rng = build_tokenizer(), random.Random(3)
    kinds = {"query": 0, "bridge": 0, "answer": 0}
    for _ in range(300):
        ids, mask = name_fact(rng, tok)
        k = mask.index(1)
        assert all(mask[k:]) and not any(mask[:k])
        prompt, name = tok.decode(ids[:k]), tok.decode(ids[k:])
        assert name.endswith("\n") and name.strip() in prompt
        name = name.strip()
        entity, first, second = parse_question(prompt)
        if prompt.startswith("In which"):
            kinds["query"] += 1
            assert name == entity
        elif prompt.endswith("Query: "):
            kinds["bridge"] += 1
            assert name == follow(prompt, entity, first)
        else:
            kinds["answer"] += 1
            assert name == follow(prompt, follow(prompt, entity, first), second)
    assert min(kinds.values()) > 70, kinds


def test_shifted_name_facts_put_passages_that_do_not_name_the_entity_first():
    """A shifted fact is the same kind of fact after one to three passages without the question's
    entity, so only reading the question finds the name; facts without `shift` stay as before."""
    from rolecall.basemodel.make import name_fact_text
    from rolecall.basemodel.search_oracle import follow, parse_question

    plain, shifted = random.Random(4), random.Random(4)
    kinds = dict.fromkeys(("question", "bridge", "answer"), 0)
    for _ in range(200):
        kind, text, name = name_fact_text(shifted, shift=True)
        kinds[kind] += 1
        entity, first, second = parse_question(text)
        question_at = text.index("In which")
        assert question_at > 0 and not re.search(rf"\b{entity}\b", text.split(". ")[0])
        if kind == "question":
            assert name == entity and text.endswith("Query: ")
            assert not re.search(rf"\b{entity}\b", text[:question_at])
        elif kind == "bridge":
            assert name == follow(text, entity, first)
        else:
            assert name == follow(text, follow(text, entity, first), second) and text.endswith("Answer: ")
    assert min(kinds.values()) > 40, kinds
    kind, text, name = name_fact_text(plain)
    assert kind != "question" or text.startswith("In which")


def test_search_transcripts_play_each_episode_on_its_own_world():
    from rolecall.basemodel.make import search_transcripts

    examples = search_transcripts(lambda msgs: msgs[-1]["content"], 12, OracleRates(), seed=5)
    questions = {re.search(r"Question: (.*)", p).group(1) for p, _ in examples}
    assert len(questions) == 12
    assert all(last_boxed(c) for _, c in examples)
    # a right searcher's query is a name on its page: the question's, or a passage's
    searches = [(p, last_boxed(c)) for p, c in examples if p.startswith("Find evidence")]
    assert sum(q in p for p, q in searches) / len(searches) > 0.5


def test_make_base_into_a_log_prints_progress_lines(tmp_path, monkeypatch):
    """Piped to a file, a rich bar draws nothing until the end; a 90-minute build must still show
    that it moves: one plain line per 5 % of the steps, the last one included."""
    from typer.testing import CliRunner

    from rolecall.basemodel import make
    from rolecall.cli import app

    def fake_make_base(out, progress=None, **_):
        for step in range(1, 101):
            progress(step, 100, 1.0 / step)
        return {"steps": 100}

    monkeypatch.setattr(make, "make_base", fake_make_base)
    result = CliRunner().invoke(app, ["make-base", "--out", str(tmp_path / "m")])
    assert result.exit_code == 0, result.output
    lines = [x for x in result.output.splitlines() if x.startswith("pretraining step")]
    assert lines[0] == "pretraining step 5/100 loss 0.200" and lines[-1] == "pretraining step 100/100 loss 0.010"
    assert len(lines) == 20


def test_make_base_shift_facts_reaches_the_copy_phase(tmp_path, monkeypatch):
    """`--shift-facts` is passed to the build, whose copy phase then draws shifted name facts."""
    from typer.testing import CliRunner

    from rolecall.basemodel import make
    from rolecall.basemodel.tokenizer import build_tokenizer
    from rolecall.cli import app

    seen = {}

    def fake_make_base(out, progress=None, **kw):
        seen.update(kw)
        return {"steps": 0}

    monkeypatch.setattr(make, "make_base", fake_make_base)
    result = CliRunner().invoke(app, ["make-base", "--out", str(tmp_path / "m"), "--copy-steps", "5", "--shift-facts"])
    assert result.exit_code == 0, result.output
    assert seen["shift_facts"] is True and seen["n_copy_steps"] == 5
    tok = build_tokenizer()
    for shift in (False, True):
        rows = [r for batch in make.copy_steps(40, 4, tok, 17, shift) for r in batch]
        prompts = [tok.decode(ids[:mask.index(1)]) for ids, mask in rows if "In which" in tok.decode(ids)]
        at_start = sum(p.startswith("In which") for p in prompts)
        assert (at_start == 0) if shift else (at_start > 0), (shift, at_start)


def test_make_base_search_only_drops_every_other_phase(tmp_path, monkeypatch):
    """`--search-only` builds from the copy phase and search data alone (no arithmetic facts,
    no other workflow's turns) and refuses to run with nothing to learn."""
    from typer.testing import CliRunner

    from rolecall.basemodel import make
    from rolecall.cli import app

    seen = {}

    def fake_make_base(out, progress=None, **kw):
        seen.update(kw)
        return {"steps": 0}

    monkeypatch.setattr(make, "make_base", fake_make_base)
    result = CliRunner().invoke(app, ["make-base", "--out", str(tmp_path / "m"), "--search-only",
                                      "--search-episodes", "7", "--fact-steps", "900"])
    assert result.exit_code == 0, result.output
    assert seen == {**seen, "fact_steps": 0, "episodes_per_workflow": 0, "role_functions": 0, "n_chat_facts": 0,
                    "search_episodes": 7}
    result = CliRunner().invoke(app, ["make-base", "--out", str(tmp_path / "m"), "--search-only"])
    assert result.exit_code != 0 and "--search-episodes" in result.output
    seen.clear()  # without --out it would replace the embedded model, which every other workflow needs
    result = CliRunner().invoke(app, ["make-base", "--search-only", "--search-episodes", "7"])
    assert result.exit_code != 0 and "--out" in result.output and not seen
