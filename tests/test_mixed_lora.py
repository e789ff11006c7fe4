"""The row-masked mixed-adapter forward equals PEFT's per-row adapter path, and only applies where it can."""
from __future__ import annotations

import pytest
import torch

from rolecall.engines.base import GenRequest
from rolecall.engines.hf import HFEngine
from rolecall.policies import mixed_lora
from rolecall.policies.model import attach_adapters, load_base, peft_row_names


@pytest.fixture(scope="module")
def three_adapters(tiny_model_dir):
    from peft import LoraConfig

    model, tok = load_base(str(tiny_model_dir))
    model = attach_adapters(model, ["a", "b"], r=4, alpha=8, dropout=0.0, target_modules="all-linear")
    # A third adapter of another rank and scaling: blocks of different widths in one layer.
    model.add_adapter("c", LoraConfig(r=2, lora_alpha=7, target_modules="all-linear", task_type="CAUSAL_LM"))
    torch.manual_seed(3)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_" in n:
                p.normal_(0, 0.3)
    model.eval()
    return model, tok


ROWS = ["a", "b", "c", "base", "c", "a"]


def test_row_masked_forward_equals_peft_per_row_adapters(three_adapters):
    model, _ = three_adapters
    x = torch.randint(5, 30, (len(ROWS), 9))
    with torch.no_grad():
        ref = model(input_ids=x, adapter_names=peft_row_names(ROWS)).logits
        with mixed_lora.row_adapters(model, ROWS):
            got = model(input_ids=x).logits
        again = model(input_ids=x, adapter_names=peft_row_names(ROWS)).logits
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=0)
    torch.testing.assert_close(again, ref, atol=0, rtol=0)  # PEFT's forward is back after the block
    # Rows really differ by adapter (else equality would prove nothing).
    with torch.no_grad():
        same = model(input_ids=x[:1].expand(len(ROWS), -1), adapter_names=peft_row_names(ROWS)).logits
    assert (same[0] - same[1]).abs().max() > 1e-3 and (same[0] - same[3]).abs().max() > 1e-3


def test_row_masked_forward_is_restored_after_an_error(three_adapters):
    model, _ = three_adapters
    with pytest.raises(RuntimeError, match="batch of 2 rows"):
        with mixed_lora.row_adapters(model, ROWS), torch.no_grad():
            model(input_ids=torch.randint(5, 30, (2, 4)))  # wrong batch size is refused, not broadcast
    assert not any("forward" in vars(m) for m in model.modules())


def test_unsupported_adapters_fall_back_to_peft(tiny_model_dir):
    from peft import LoraConfig

    model, tok = load_base(str(tiny_model_dir))
    model = attach_adapters(model, ["a"], r=4, alpha=8, dropout=0.0, target_modules="all-linear")
    model.add_adapter("d", LoraConfig(r=4, use_dora=True, target_modules="all-linear", task_type="CAUSAL_LM"))
    assert mixed_lora.supports(model, ["a", "base"])
    assert not mixed_lora.supports(model, ["a", "d"])  # DoRA is not plain LoRA
    with torch.no_grad():  # a DoRA adapter that really differs from the base
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)
    eng = HFEngine(model, tok, max_batch=2)
    reqs = lambda pols: [GenRequest([{"role": "user", "content": "1+2"}], p, 6) for p in pols]
    mixed = eng.generate(reqs(["a", "d", "d", "a", "d"]), temperature=0)  # PEFT would refuse this batch
    alone = {p: eng.generate(reqs([p]), temperature=0)[0].completion_ids for p in "ad"}
    assert [o.completion_ids for o in mixed] == [alone[p] for p in "adda" "d"]
    assert alone["a"] != alone["d"]
