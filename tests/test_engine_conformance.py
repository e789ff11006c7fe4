"""The engine contract, run against every engine present: HF (plain model and with adapters),
the routed engine over two bases, the scripted engine; vLLM joins when it is installed.

What every engine owes the rollout: one output per request, in request order, whatever the
mix of policies; a reply within its token budget, with `finish_reason` "length" when the
budget cut it; token ids and log-probs of the sampled tokens, as many as there are tokens
(engines that produce tokens); the same tokens for a seeded request however the batch is
made (engines that honour `GenRequest.seed`).
"""
from __future__ import annotations

import math

import pytest

from rolecall.engines.base import GenRequest


def _hf(model_dir, adapters=("a", "b")):
    from rolecall.engines.hf import HFEngine
    from rolecall.policies.model import attach_adapters, load_model, load_tokenizer

    model = load_model(str(model_dir), "float32", "cpu")
    if adapters:
        model = attach_adapters(model, list(adapters), r=4, alpha=8, dropout=0.0, target_modules="all-linear")
    return HFEngine(model, load_tokenizer(str(model_dir)), max_batch=3)


def _routed(model_dir):
    from rolecall.engines.routed import RoutedEngine

    return RoutedEngine({"b": _hf(model_dir, ("b",))}, _hf(model_dir, ("a",)))


def _scripted(model_dir):
    from rolecall.testing import ScriptedEngine

    return ScriptedEngine(lambda req: f"{req.policy}:{req.messages[-1]['content'][:4]}")


def _vllm_model_dir() -> str:
    """A tiny Qwen3 with 32-wide attention heads: vLLM's CPU attention has no kernel for the
    shared tiny model's 8-wide heads."""
    import tempfile

    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from rolecall.basemodel.tokenizer import build_tokenizer

    d = tempfile.mkdtemp(prefix="rc-vllm-tiny-")
    tok = build_tokenizer()
    torch.manual_seed(0)
    Qwen3ForCausalLM(Qwen3Config(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                 num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=512,
                                 tie_word_embeddings=True, eos_token_id=tok.eos_token_id,
                                 pad_token_id=tok.pad_token_id)).save_pretrained(d)
    tok.save_pretrained(d)
    return d


def _vllm(_shared_tiny_dir):
    """vLLM with the adapters `a` and `b` published from a PEFT model (where vLLM is installed)."""
    from rolecall.engines.vllm import VLLMEngine
    from rolecall.policies.model import load_tokenizer

    model_dir = _vllm_model_dir()
    hf = _hf(model_dir)
    eng = VLLMEngine(model_dir, load_tokenizer(str(model_dir)), adapters=("a", "b"), max_lora_rank=4,
                     memory_fraction=0.1, dtype="float32")
    eng.publish({"a": hf.model, "b": hf.model})
    eng.stop_ids = hf.stop_ids
    return eng


ENGINES = {"hf": _hf, "hf-plain": lambda d: _hf(d, ()), "routed": _routed, "scripted": _scripted}
TOKENS = {"hf", "hf-plain", "routed", "vllm"}  # engines that produce token ids and log-probs
SEEDED = {"hf", "hf-plain", "routed", "vllm"}  # engines that honour GenRequest.seed
try:
    import vllm  # noqa: F401

    ENGINES["vllm"] = _vllm
except ImportError:
    pass


@pytest.fixture(params=sorted(ENGINES))
def engine(request, tiny_model_dir):
    return request.param, ENGINES[request.param](tiny_model_dir)


def _policies(name):
    return ["base", "base", "base"] if name == "hf-plain" else ["a", "b", "base"]


def test_one_output_per_request_in_order_with_mixed_policies(engine):
    name, eng = engine
    pols = _policies(name)
    reqs = [GenRequest([{"role": "user", "content": f"q{i} 12+{i}"}], pols[i % 3], 5) for i in range(7)]
    outs = eng.generate(reqs, temperature=0.7)
    assert len(outs) == len(reqs)
    if name == "scripted":
        assert [o.completion_text for o in outs] == [f"{r.policy}:q{i} 1" for i, r in enumerate(reqs)]
    for r, o in zip(reqs, outs):
        assert r.messages[-1]["content"] in o.prompt_text  # each output answers its own request
        assert o.finish_reason in ("stop", "length")


def test_budgets_tokens_and_log_probs(engine):
    name, eng = engine
    if name not in TOKENS:
        pytest.skip(f"the {name} engine produces text only")
    pols = _policies(name)
    reqs = [GenRequest([{"role": "user", "content": "count"}], pols[i], budget) for i, budget in enumerate((1, 3, 6))]
    for r, o in zip(reqs, eng.generate(reqs, temperature=1.0)):
        assert 1 <= len(o.completion_ids) <= r.max_new_tokens
        assert len(o.logprobs) == len(o.completion_ids) and all(lp <= 0 and math.isfinite(lp) for lp in o.logprobs)
        stops = set(getattr(eng, "default", eng).stop_ids)  # a routed engine: its bases share the tokenizer here
        if o.finish_reason == "stop":
            assert o.completion_ids[-1] in stops
        else:
            assert len(o.completion_ids) == r.max_new_tokens and o.completion_ids[-1] not in stops
        assert o.prompt_ids and isinstance(o.prompt_ids[0], int)


def test_seeded_requests_do_not_depend_on_the_batch(engine):
    name, eng = engine
    if name not in SEEDED:
        pytest.skip(f"the {name} engine does not take per-request seeds")
    pols = _policies(name)
    reqs = [GenRequest([{"role": "user", "content": f"r{i}"}], pols[i % 3], 6, seed=100 + i) for i in range(5)]
    together = [o.completion_ids for o in eng.generate(reqs, temperature=1.0)]
    alone = [eng.generate([r], temperature=1.0)[0].completion_ids for r in reqs]
    assert together == alone


def test_vllm_joins_the_suite_when_installed():
    pytest.importorskip("vllm", reason="vLLM is not installed here: benchmarks/vllm_cpu.sh runs it in a venv of its own")
    assert "vllm" in ENGINES


def test_asking_for_vllm_without_it_says_how_to_get_it(tiny_model_dir):
    try:
        import vllm  # noqa: F401
        pytest.skip("vLLM is installed here")
    except ImportError:
        pass
    import rolecall
    from rolecall.engines.vllm import VLLMUnavailable
    from rolecall.train.stack import build_stack

    with pytest.raises(VLLMUnavailable, match="rollout.engine=vllm needs vLLM"):
        build_stack(rolecall.make_config({"model": {"path": str(tiny_model_dir)}, "rollout": {"engine": "vllm"}}))
