"""benchmarks/real_speed.py's pieces that do not need SmolLM2: the FLOP shape read from a llama
checkpoint's config, and prompts of an exact token length under a BPE tokenizer (the tiny
GGUF of gguf_tiny.py, converted)."""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gguf_tiny import write_tiny_gguf  # noqa: E402


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    import os

    from rolecall.policies.gguf import converted_dir

    store = tmp_path_factory.mktemp("models")
    before = os.environ.get("ROLECALL_MODELS")
    os.environ["ROLECALL_MODELS"] = str(store)
    try:
        yield converted_dir(write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf"))
    finally:
        if before is None:
            os.environ.pop("ROLECALL_MODELS", None)
        else:
            os.environ["ROLECALL_MODELS"] = before


def test_shape_is_read_from_the_checkpoints_config(tiny_llama):
    from benchmarks.real_speed import shape_of

    c = json.loads((tiny_llama / "config.json").read_text())
    s = shape_of(tiny_llama, 4)
    assert (s.hidden, s.layers, s.heads, s.kv_heads, s.vocab, s.intermediate, s.lora_r) == (
        c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"], c["num_key_value_heads"],
        c["vocab_size"], c["intermediate_size"], 4)
    assert s.n_lin == c["num_hidden_layers"] * sum(i * o for i, o in s.linears())


@pytest.mark.parametrize("P", [30, 47, 64])
def test_exact_prompt_has_exactly_P_tokens_under_a_bpe_tokenizer(tiny_llama, P):
    from benchmarks.compute import exact_prompt
    from rolecall.engines.hf import HFEngine
    from rolecall.policies.model import load_base

    model, tok = load_base(str(tiny_llama))
    engine = HFEngine(model, tok)
    text = exact_prompt(engine, tok, P, random.Random(P))
    rendered = engine.render([{"role": "user", "content": text}])
    assert len(tok(rendered, add_special_tokens=False)["input_ids"]) == P
