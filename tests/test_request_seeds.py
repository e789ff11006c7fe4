"""Per-request sampling seeds: a request's tokens depend on its seed, not on its batch."""
from __future__ import annotations

import rolecall
from rolecall.engines.base import GenRequest


def _engine(tiny_model_dir, max_batch=64):
    from rolecall.engines.hf import HFEngine
    from rolecall.policies.model import load_model, load_tokenizer

    return HFEngine(load_model(str(tiny_model_dir), "float32", "cpu"), load_tokenizer(str(tiny_model_dir)),
                    max_batch=max_batch)


def _req(text, seed):
    return GenRequest([{"role": "user", "content": text}], "base", 12, seed)


def test_a_seeded_request_samples_the_same_tokens_in_any_batch(tiny_model_dir):
    engine = _engine(tiny_model_dir)
    reqs = [_req("12+30", 1), _req("12+30", 2), _req("7+8 and more", 3)]
    together = [o.completion_ids for o in engine.generate(reqs, temperature=1.0)]
    alone = [engine.generate([r], temperature=1.0)[0].completion_ids for r in reqs]
    reversed_ = [o.completion_ids for o in engine.generate(reqs[::-1], temperature=1.0)][::-1]
    assert together == alone == reversed_
    assert together[0] != together[1]  # same prompt, other seed: another sample
    again = [o.completion_ids for o in engine.generate(reqs, temperature=1.0)]
    assert again == together  # no global generator involved


def test_seeded_sampling_draws_from_the_model_distribution(tiny_model_dir):
    """The exponential race samples p: token frequencies over many seeds match the softmax."""
    import torch

    engine = _engine(tiny_model_dir)
    reqs = [GenRequest([{"role": "user", "content": "hi"}], "base", 1, s) for s in range(2000)]
    firsts = torch.tensor([o.completion_ids[0] for o in engine.generate(reqs, temperature=1.0)])
    text = engine.render([{"role": "user", "content": "hi"}])
    ids = torch.tensor([engine.tok(text, add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        p = torch.softmax(engine.model(input_ids=ids).logits[0, -1].float(), -1)
    freq = torch.bincount(firsts, minlength=p.numel()).float() / len(firsts)
    assert (freq - p).abs().max() < 0.04  # 2,000 draws: a few standard errors at most


def test_a_seeded_rollout_is_the_same_however_it_is_batched(tiny_model_dir):
    from rolecall.rollout import rollout
    from rolecall.tasks.arithmetic import ArithmeticTask
    from rolecall.workflows import build_workflow, load_prompts

    wf = build_workflow("voting", load_prompts("math"), {})
    problems = ArithmeticTask(n_val=4).validation()
    runs = []
    for max_batch in (64, 3):
        eps = rollout(wf, problems, 2, _engine(tiny_model_dir, max_batch), {"generator": "base", "aggregator": "base"},
                      lambda role: 6, 1.0, seed=123)
        runs.append([[t.completion_text for t in ep.turns] for ep in eps])
    assert runs[0] == runs[1]
    cfg = rolecall.make_config({"rollout": {"request_seeds": True}})
    assert cfg.rollout.request_seeds
