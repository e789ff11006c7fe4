"""The HF engine on a tiny real model: mixed-adapter batches, log-prob alignment, truncation."""
from __future__ import annotations

import pytest
import torch

from rolecall.engines.base import GenRequest
from rolecall.engines.hf import HFEngine
from rolecall.loss import token_logprobs_and_entropy
from rolecall.policies.model import attach_adapters, load_base
from rolecall.algo.batch import Row, collate
from rolecall.algo.forward import completion_logits


def peft_row_names(policies: list[str]) -> list[str]:
    """PEFT's own per-row adapter list (the reference the router is checked against): "no adapter" is "__base__"."""
    return ["__base__" if p == "base" else p for p in policies]


@pytest.fixture(scope="module")
def two_adapter_model(tiny_model_dir):
    model, tok = load_base(str(tiny_model_dir))
    with torch.no_grad():  # sharpen the random model so outputs are not near-uniform
        model.get_input_embeddings().weight.mul_(40.0)
    model = attach_adapters(model, ["gen", "agg"], r=4, alpha=8, dropout=0.0, target_modules="all-linear")
    torch.manual_seed(1)
    with torch.no_grad():  # distinct, non-zero adapters (default LoRA init is a no-op)
        for n, p in model.named_parameters():
            if "lora_" in n:
                p.normal_(0, 0.5)
    return model, tok


def _reqs(policies, prompts):
    return [GenRequest([{"role": "user", "content": c}], p, 12) for p, c in zip(policies, prompts)]


def test_mixed_adapter_batch_equals_per_adapter_batches(two_adapter_model):
    model, tok = two_adapter_model
    eng = HFEngine(model, tok)
    prompts = ["12+34", "56+78", "90-12", "34+56"]  # same length: identical padding in every batch
    mixed = eng.generate(_reqs(["gen", "agg", "gen", "agg"], prompts), temperature=0)
    only_a = eng.generate(_reqs(["gen", "gen"], prompts[0::2]), temperature=0)
    only_b = eng.generate(_reqs(["agg", "agg"], prompts[1::2]), temperature=0)
    for m, s in zip(mixed, [only_a[0], only_b[0], only_a[1], only_b[1]]):
        assert m.completion_ids == s.completion_ids
        torch.testing.assert_close(torch.tensor(m.logprobs), torch.tensor(s.logprobs), atol=1e-4, rtol=0)
    # the adapters really differ, otherwise the test above proves nothing
    a_all = eng.generate(_reqs(["gen"] * 4, prompts), temperature=0)
    assert any(x.completion_ids != y.completion_ids for x, y in zip(a_all, mixed))


def test_sampling_logprobs_match_trainer_forward(two_adapter_model):
    """What the engine records is what the trainer recomputes (chi2 ~ 0 at step 0)."""
    model, tok = two_adapter_model
    eng = HFEngine(model, tok)
    torch.manual_seed(0)
    outs = eng.generate(_reqs(["gen", "gen", "gen"], ["1+1", "23+45", "a longer prompt 9-3"]), temperature=0.7)
    rows = [Row(o.prompt_ids + o.completion_ids, len(o.prompt_ids), o.logprobs, 0.0, "r", "r") for o in outs]
    b = collate(rows, tok.pad_token_id)
    model.set_adapter("gen")
    model.eval()
    with torch.no_grad():
        logits = completion_logits(model, b)
    logp, _ = token_logprobs_and_entropy(logits, b["targets"], 0.7)
    m = b["mask"] > 0
    assert m.sum() > 5
    torch.testing.assert_close(logp[m], b["rollout_logp"][m], atol=2e-4, rtol=0)


def test_budget_cuts_and_marks_truncated(two_adapter_model):
    model, tok = two_adapter_model
    eng = HFEngine(model, tok)
    reqs = [GenRequest([{"role": "user", "content": "12+34"}], "gen", 3),
            GenRequest([{"role": "user", "content": "12+34"}], "agg", 40)]
    torch.manual_seed(0)
    out = eng.generate(reqs, temperature=1.0)
    assert len(out[0].completion_ids) <= 3 and len(out[0].logprobs) == len(out[0].completion_ids)
    for o in out:
        ends_eos = bool(o.completion_ids) and o.completion_ids[-1] == tok.eos_token_id
        assert o.finish_reason == ("stop" if ends_eos else "length")


def test_every_listed_end_of_turn_token_stops_a_turn(tiny_model_dir):
    """Real Qwen3 checkpoints list two eos ids in generation_config; either ends the turn."""
    from rolecall.engines.hf import stop_token_ids

    model, tok = load_base(str(tiny_model_dir))
    pad = tok.pad_token_id  # `<|endoftext|>` in the character tokenizer, as in Qwen3
    model.generation_config.eos_token_id = [tok.eos_token_id, pad]
    eng = HFEngine(model, tok)
    assert stop_token_ids(model, tok) == [tok.eos_token_id, pad]
    out = eng._finish("p", [1], [5, 6, pad, 7], [-0.1, -0.2, -0.3, -0.4], budget=10)
    assert out.completion_ids == [5, 6, pad] and out.finish_reason == "stop" and len(out.logprobs) == 3
    out = eng._finish("p", [1], [5, 6, 7, 8], [-0.1] * 4, budget=3)
    assert out.completion_ids == [5, 6, 7] and out.finish_reason == "length"


def test_ignore_eos_runs_every_turn_to_its_budget():
    """rollout.ignore_eos: the same tokens up to the end-of-turn, then on to the full budget
    (the embedded model ends its answers well inside 60 tokens)."""
    from rolecall.policies.model import embedded_dir

    model, tok = load_base(str(embedded_dir()))
    reqs = [GenRequest([{"role": "user", "content": f"Solve. Put the final answer in \\boxed{{}}.\n{p}"}], "base", 60)
            for p in ("12+34", "56-7")]
    stopped = HFEngine(model, tok).generate(reqs, temperature=0)
    assert all(o.finish_reason == "stop" and len(o.completion_ids) < 60 for o in stopped)
    full = HFEngine(model, tok, ignore_eos=True).generate(reqs, temperature=0)
    for s, f in zip(stopped, full):
        assert f.finish_reason == "length" and len(f.completion_ids) == len(f.logprobs) == 60
        n = len(s.completion_ids)
        assert f.completion_ids[:n] == s.completion_ids  # the end-of-turn token is sampled, then passed over
        torch.testing.assert_close(torch.tensor(f.logprobs[:n]), torch.tensor(s.logprobs), atol=1e-5, rtol=0)


def test_over_budget_prompt_is_not_generated_and_the_rest_proceeds(two_adapter_model):
    model, tok = two_adapter_model
    eng = HFEngine(model, tok, max_prompt_tokens=30)
    reqs = [GenRequest([{"role": "user", "content": "1+1"}], "gen", 5),
            GenRequest([{"role": "user", "content": "9" * 200}], "agg", 5),
            GenRequest([{"role": "user", "content": "2+2"}], "agg", 5)]
    torch.manual_seed(0)
    out = eng.generate(reqs, temperature=1.0)
    assert out[1].completion_ids == [] and out[1].finish_reason == "length" and len(out[1].prompt_ids) > 30
    assert out[0].completion_ids and out[2].completion_ids  # the rest of the wave ran


def _hf_reference(model, eng, reqs, temperature):
    """HF `generate` itself, PEFT's per-row adapters, the temperature as its warper: the sampling
    rule the engine's own decode loop must reproduce (tokens and the log-probs sampled from)."""
    from transformers import GenerationConfig

    texts = [eng.render(r.messages) for r in reqs]
    enc = eng.tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    cfg = GenerationConfig(max_new_tokens=max(r.max_new_tokens for r in reqs), do_sample=temperature > 0,
                           temperature=temperature if temperature > 0 else 1.0, top_k=None, top_p=1.0,
                           pad_token_id=eng.tok.pad_token_id, eos_token_id=eng.stop_ids)
    model.eval()
    out = model.generate(**enc, generation_config=cfg, adapter_names=peft_row_names([r.policy for r in reqs]),
                         output_scores=True, return_dict_in_generate=True)
    gen = out.sequences[:, enc["input_ids"].shape[1]:]
    lp = torch.stack([torch.log_softmax(s.float(), -1).gather(1, gen[:, j:j + 1]).squeeze(1)
                      for j, s in enumerate(out.scores)], 1)
    return [eng._finish("", [], g, l, r.max_new_tokens) for g, l, r in zip(gen.tolist(), lp.tolist(), reqs)]


@pytest.mark.parametrize("windows", [False, True])
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_decode_loop_reproduces_hf_generate_and_prefills_each_prompt_once(two_adapter_model, temperature, windows,
                                                                          monkeypatch):
    """Repeated (prompt, policy) pairs share one prefill; tokens and log-probs equal HF generate's.
    With `windows` the prefill runs one distinct prompt at a time into the one cache (what a
    CPU does when rows x width passes CPU_PREFILL_TOKENS), across two policies, and nothing
    changes."""
    import rolecall.engines.hf as hf

    if windows:
        monkeypatch.setattr(hf, "CPU_PREFILL_TOKENS", 1)
    model, tok = two_adapter_model
    eng = HFEngine(model, tok)
    prompts = ["1+1", "23+45", "1+1", "23+45", "1+1", "7-2", "1+1"]
    policies = ["gen", "gen", "gen", "agg", "agg", "agg", "gen"]  # "23+45" repeats under two policies
    reqs = _reqs(policies, prompts)
    shapes = []  # (rows, tokens) of every model call
    hook = model.register_forward_pre_hook(lambda m, a, kw: shapes.append(tuple(kw["input_ids"].shape)),
                                           with_kwargs=True)
    try:
        torch.manual_seed(5)
        ours = eng.generate(reqs, temperature=temperature)
    finally:
        hook.remove()
    prefill = 5 if windows else 1  # the prefill: 7 rows, 5 distinct (prompt, policy) pairs
    assert [s[0] for s in shapes[:prefill]] == ([1] * 5 if windows else [5]) and shapes[0][1] > 1
    assert all(s == (7, 1) for s in shapes[prefill:])  # then one token per row per step
    if temperature == 0:  # greedy: token for token HF generate's
        ref = _hf_reference(model, eng, reqs, temperature)
        for o, r in zip(ours, ref):
            assert o.completion_ids == r.completion_ids and o.finish_reason == r.finish_reason
            torch.testing.assert_close(torch.tensor(o.logprobs), torch.tensor(r.logprobs), atol=1e-4, rtol=0)
    else:  # sampled: the engine draws by inverse CDF, not HF's exponential race (other tokens, same
        # distribution; test_inverse_cdf_* below), so each sampled token's log-prob is checked against
        # the model's own tempered distribution, teacher-forced through PEFT's per-row adapters
        assert all(o.completion_ids for o in ours)
        for o, r in zip(ours, reqs):
            ids = torch.tensor([o.prompt_ids + o.completion_ids])
            model.eval()
            with torch.no_grad():
                logits = model(input_ids=ids, adapter_names=[r.policy]).logits[0, len(o.prompt_ids) - 1:-1]
            ref = torch.log_softmax(logits.float() / temperature, -1).gather(1, ids[0, len(o.prompt_ids):, None])
            torch.testing.assert_close(torch.tensor(o.logprobs), ref.squeeze(1), atol=1e-4, rtol=0)
    assert len({tuple(o.completion_ids) for o in ours}) > 2  # rows really differ


def test_inverse_cdf_sampling_follows_the_distribution_and_never_picks_an_impossible_token():
    from rolecall.engines.hf import _inverse_cdf

    p = torch.tensor([[0.0, 0.1, 0.0, 0.6, 0.3, 0.0]])
    edges = _inverse_cdf(p.repeat(3, 1), torch.tensor([[0.0], [0.0999], [1.0 - 1e-7]]))
    assert edges.tolist() == [1, 1, 4], "u at the edges lands on possible tokens only"
    gen = torch.Generator().manual_seed(0)
    n = 100_000
    drawn = _inverse_cdf(p.repeat(n, 1), torch.rand(n, 1, generator=gen))
    freq = torch.bincount(drawn, minlength=6).float() / n
    assert torch.allclose(freq, p[0], atol=0.01), freq


def test_a_cpu_call_keeps_its_cache_within_budget_in_consecutive_pieces(monkeypatch):
    """Rows are cut into consecutive pieces whose cache (rows x (longest prompt + budget)
    positions) fits CPU_CACHE_BYTES, and of at most max_batch rows; no bound off the CPU."""
    import rolecall.engines.hf as hf

    eng = object.__new__(HFEngine)
    eng.max_batch = 4
    monkeypatch.setattr(hf, "CPU_CACHE_BYTES", 1000)
    reqs = [GenRequest([], "p", 10) for _ in range(7)]
    lengths = [10, 10, 30, 10, 10, 10, 10]
    # 10 bytes a position: 20 positions a row fit 5 rows by bytes but max_batch 4; the 40-position
    # row makes a piece of 2 rows 800 bytes, a third would be 1200
    assert eng._fit(list(range(7)), reqs, lengths, 10) == [[0, 1], [2, 3], [4, 5, 6]]
    assert eng._fit(list(range(7)), reqs, lengths, 0) == [[0, 1, 2, 3], [4, 5, 6]]  # no bound: max_batch only
    assert eng._fit([], reqs, lengths, 10) == []
