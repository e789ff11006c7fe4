"""The decode loop's buffer cache and folded attention equal transformers' dynamic cache and SDPA."""
from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from rolecall.engines.decode_kv import buffer_cache, folded_decode
from rolecall.policies.model import load_base


@pytest.mark.parametrize("capacity", [64, 3], ids=["room-for-all", "grows"])
def test_buffer_cache_and_folded_decode_match_the_dynamic_cache(tiny_model_dir, capacity):
    model, _ = load_base(str(tiny_model_dir))
    assert model.config.num_attention_heads > model.config.num_key_value_heads  # grouped heads: the folded case
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 90, (3, 7), generator=g)
    attn = torch.ones_like(ids)
    attn[0, :3] = 0  # left padding: decode steps carry a mask
    attn[2, :1] = 0
    steps = torch.randint(5, 90, (3, 6), generator=g)

    def run(cache, fold: bool):
        logits = []
        with torch.no_grad(), (folded_decode(model) if fold else torch.no_grad()):
            pos = (attn.cumsum(-1) - 1).clamp(min=0)
            out = model(input_ids=ids, attention_mask=attn, position_ids=pos, past_key_values=cache, use_cache=True)
            logits.append(out.logits[:, -1])
            cache.reorder_cache(torch.tensor([0, 1, 2, 1]))  # rows reading a shared prompt, as the engine does
            a, p = attn[[0, 1, 2, 1]], pos[[0, 1, 2, 1], -1:]
            for t in range(steps.shape[1]):
                a = torch.cat([a, a.new_ones((4, 1))], 1)
                p = p + 1
                out = model(input_ids=steps[[0, 1, 2, 1], t:t + 1], attention_mask=a, position_ids=p,
                            past_key_values=cache, use_cache=True)
                logits.append(out.logits[:, -1])
        return logits

    ref = run(DynamicCache(config=model.config), fold=False)
    calls = []
    from rolecall.engines import decode_kv

    spy = decode_kv._attention
    decode_kv._attention = lambda *a, **k: calls.append(a[1].shape[2]) or spy(*a, **k)
    try:
        ours = run(buffer_cache(model.config, capacity), fold=True)
    finally:
        decode_kv._attention = spy
    assert model.config._attn_implementation == "sdpa"  # restored after the block
    for x, y in zip(ours, ref):
        torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-5)
    assert calls.count(1) == steps.shape[1] * model.config.num_hidden_layers  # every decode step folded


def test_a_cache_is_one_block_sized_to_prompt_and_budget(tiny_model_dir):
    """Every layer's buffers are views of one allocation (freed back to the system in one piece,
    not left in the heap as one block per layer), of exactly the capacity asked for: a prompt
    longer than the budget once doubled the positions, and the memory, of a piece."""
    model, _ = load_base(str(tiny_model_dir))
    ids = torch.randint(5, 90, (2, 7), generator=torch.Generator().manual_seed(0))
    cache = buffer_cache(model.config, 7 + 3)
    with torch.no_grad():
        model(input_ids=ids, attention_mask=torch.ones_like(ids), past_key_values=cache, use_cache=True)
    storages = {layer._k.untyped_storage().data_ptr() for layer in cache.layers}
    storages |= {layer._v.untyped_storage().data_ptr() for layer in cache.layers}
    assert len(storages) == 1
    assert {tuple(layer._k.shape[-2:-1]) for layer in cache.layers} == {(10,)}
