"""`rolecall make-base` is reproducible byte for byte: the same seed and sizes give the same
weights file (the shipped model's full build is checked by rebuilding it; this is the same
pipeline — oracle transcripts of every workflow, varied wordings, facts, one optimizer — at a
size the test suite can afford), and another seed gives other weights."""
from __future__ import annotations

import hashlib

import torch

from rolecall.basemodel.make import make_base

SMALL = dict(fact_steps=2, fact_batch=4, batch=16, episodes_per_workflow=4, n_chat_facts=24, role_functions=48,
             search_episodes=3, n_copy_steps=2)


def _build(out, seed: int) -> str:
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # the shipped build's thread count; results are only promised per torch build
    try:
        info = make_base(out, seed=seed, **SMALL)
    finally:
        torch.set_num_threads(threads)
    assert info["steps"] > SMALL["fact_steps"]  # the role transcripts were trained on too
    return hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest()


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    first = _build(tmp_path / "a", 0)
    assert _build(tmp_path / "b", 0) == first
    assert (tmp_path / "a" / "tokenizer.json").read_bytes() == (tmp_path / "b" / "tokenizer.json").read_bytes()
    assert _build(tmp_path / "c", 1) != first


def test_init_from_continues_from_the_given_weights_and_records_them(tmp_path):
    """A second stage starts from the first stage's weights (at lr 0 it ends on them exactly),
    records the first stage's build, and refuses a directory that holds no model."""
    import json

    import pytest

    first = dict(fact_steps=0, episodes_per_workflow=0, n_chat_facts=0, role_functions=0, search_episodes=2,
                 n_copy_steps=1, batch=16)
    make_base(tmp_path / "a", seed=0, **first)
    info = make_base(tmp_path / "b", seed=1, init_from=tmp_path / "a", lr=0.0, search_rate=1.0, **first)
    assert (tmp_path / "b" / "model.safetensors").read_bytes() == (tmp_path / "a" / "model.safetensors").read_bytes()
    assert info["init_from"]["build"] == json.loads((tmp_path / "a" / "rolecall_base.json").read_text())
    assert info["search_rate"] == 1.0 and info["lr"] == 0.0
    assert info["workflows"] == []  # a search-only build names none of the workflows it skipped
    assert info["versions"]["torch"] == torch.__version__ and info["versions"]["transformers"]
    with pytest.raises(FileNotFoundError, match="init_from: .* is not a model directory with a config.json"):
        make_base(tmp_path / "c", init_from=tmp_path / "nothing", **first)


def test_search_rate_sets_how_often_the_search_oracle_plays_right():
    """At rate 1 every searcher turn of the oracle's transcripts is the right query (the named
    entity first, then the bridge); at the default rate some are not. Other workflows' turns
    are not touched by it."""
    from rolecall.basemodel.make import transcripts
    from rolecall.basemodel.search_oracle import follow, parse_question
    from rolecall.basemodel.tokenizer import build_tokenizer
    from rolecall.basemodel.transcripts import OracleRates
    from rolecall.tasks.arithmetic import ArithmeticTask

    tok = build_tokenizer()

    def searcher_turns(rate):
        rows = transcripts(tok, ArithmeticTask(), 0, OracleRates(), 0, search_episodes=40, search_rate=rate)
        out = []
        for ids, n in rows:
            prompt, said = tok.decode(ids[:n]), tok.decode(ids[n:], skip_special_tokens=True)
            if "Find evidence" in prompt:
                entity, first, _ = parse_question(prompt.split("Question: ", 1)[1].split("\n", 1)[0])
                evidence = prompt.split("Evidence so far:", 1)[1]
                want = follow(evidence, entity, first) or entity
                out.append(said == f"\\boxed{{{want}}}")
        return out

    right = searcher_turns(1.0)
    assert len(right) >= 40 and all(right)
    assert not all(searcher_turns(None))
