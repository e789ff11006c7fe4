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
