"""The LoRA router equals PEFT: one adapter, the bare base, a row-masked mix (values and
gradients), and it only applies where it can."""
from __future__ import annotations

import pytest
import torch

from rolecall.engines.base import GenRequest
from rolecall.engines.hf import HFEngine
from rolecall.policies.lora_linear import lora_linear
from rolecall.policies.lora_router import router_for
from rolecall.policies.model import attach_adapters, load_base


def peft_row_names(policies: list[str]) -> list[str]:
    """PEFT's own per-row adapter list (the reference the router is checked against): "no adapter" is "__base__"."""
    return ["__base__" if p == "base" else p for p in policies]


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
        with router_for(model).rows(ROWS):
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
    x = torch.randint(5, 30, (2, 4))
    with torch.no_grad():
        before = model(input_ids=x, adapter_names=peft_row_names(["a", "c"])).logits
        with pytest.raises(RuntimeError, match="batch of 2 rows"):
            with router_for(model).rows(ROWS):
                model(input_ids=x)  # wrong batch size is refused, not broadcast
        assert router_for(model).mode is None  # outside a block: PEFT's own forward again
        torch.testing.assert_close(model(input_ids=x, adapter_names=peft_row_names(["a", "c"])).logits, before,
                                   atol=0, rtol=0)


def test_unsupported_adapters_fall_back_to_peft(tiny_model_dir):
    from peft import LoraConfig

    model, tok = load_base(str(tiny_model_dir))
    model = attach_adapters(model, ["a"], r=4, alpha=8, dropout=0.0, target_modules="all-linear")
    model.add_adapter("d", LoraConfig(r=4, use_dora=True, target_modules="all-linear", task_type="CAUSAL_LM"))
    assert router_for(model).plain( ["a", "base"])
    assert not router_for(model).plain( ["a", "d"])  # DoRA is not plain LoRA
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


def test_one_policy_and_the_bare_base_equal_peft_switches(three_adapters):
    model, _ = three_adapters
    x = torch.randint(5, 30, (3, 7))
    router = router_for(model)
    with torch.no_grad():
        for name in ("a", "c"):
            model.set_adapter(name)
            ref = model(input_ids=x).logits
            with router.policy("b" if name == "a" else "a"):  # the router's choice, not PEFT's active adapter
                other = model(input_ids=x).logits
            model.set_adapter("b" if name == "a" else "a")
            with router.policy(name):
                got = model(input_ids=x).logits
            torch.testing.assert_close(got, ref, atol=1e-6, rtol=0)
            assert (other - ref).abs().max() > 1e-3
        with model.disable_adapter():
            ref = model(input_ids=x).logits
        with router.policy("base"):
            torch.testing.assert_close(model(input_ids=x).logits, ref, atol=0, rtol=0)


def test_mixed_training_forward_gives_each_adapter_the_gradient_of_its_own_rows(three_adapters):
    """One forward + backward over rows of a, b and c equals three separate single-adapter passes."""
    model, _ = three_adapters
    router = router_for(model)
    pols = ["a", "b", "c"]
    rows = [0, 2, 1, 0, 2, 1]
    x = torch.randint(5, 30, (len(rows), 6))
    w = torch.randn(len(rows), 6, model.config.vocab_size)
    lora = {n: p for n, p in model.named_parameters() if "lora_" in n}
    for p in lora.values():
        p.requires_grad_(True)
        p.grad = None
    for k, name in enumerate(pols):
        sel = [i for i, r in enumerate(rows) if r == k]
        with router.policy(name):
            (model(input_ids=x[sel]).logits * w[sel]).sum().backward()
    separate = {n: p.grad.clone() for n, p in lora.items()}
    for p in lora.values():
        p.grad = None
    with router.mixed(pols) as set_rows:
        set_rows(torch.tensor(rows))
        (model(input_ids=x).logits * w).sum().backward()
    for n, p in lora.items():
        torch.testing.assert_close(p.grad, separate[n], atol=1e-4, rtol=1e-4)
    assert all(separate[n].abs().max() > 0 for n in lora if "lora_B" in n)  # every adapter got a gradient
    for p in lora.values():
        p.grad = None
        p.requires_grad_(False)


def test_one_policy_training_gradients_equal_peft(three_adapters, monkeypatch):
    """The router's single-adapter forward (a fused base + LoRA node) gives PEFT's gradients,
    for the adapter and for the input embeddings."""
    import rolecall.policies.lora_router as lora_router

    model, _ = three_adapters
    fused = []
    monkeypatch.setattr(lora_router, "lora_linear", lambda *a: fused.append(1) or lora_linear(*a))
    router = router_for(model)
    x = torch.randint(5, 30, (3, 7))
    w = torch.randn(3, 7, model.config.vocab_size)
    lora_c = {n: p for n, p in model.named_parameters() if "lora_" in n and ".c." in n}
    emb = model.get_input_embeddings()(x).detach()

    def grads(run):
        inputs = emb.clone().requires_grad_(True)
        for p in lora_c.values():
            p.requires_grad_(True)
            p.grad = None
        with run():
            (model(inputs_embeds=inputs).logits * w).sum().backward()
        out = {n: p.grad.clone() for n, p in lora_c.items()}
        for p in lora_c.values():
            p.grad = None
            p.requires_grad_(False)
        return out, inputs.grad

    from contextlib import contextmanager

    @contextmanager
    def peft_c():
        model.set_adapter("c")
        try:
            yield
        finally:
            model.set_adapter("a")

    want, want_x = grads(peft_c)
    got, got_x = grads(lambda: router.policy("c"))
    assert fused  # the fused node ran
    for n in want:
        torch.testing.assert_close(got[n], want[n], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got_x, want_x, atol=1e-4, rtol=1e-4)
    assert all(want[n].abs().max() > 0 for n in want if "lora_B" in n)


def test_mixed_pass_whose_rows_are_one_adapter_runs_that_adapter_alone(three_adapters, monkeypatch):
    """A training pass of a mixed block whose rows are all on one adapter takes that adapter's
    own path (not the n x r-wide concatenation): PEFT's logits, the one-policy gradients, and
    no gradient for the other adapters. A pass with two adapters' rows still mixes."""
    import rolecall.policies.lora_router as lora_router

    model, _ = three_adapters
    router = router_for(model)
    x = torch.randint(5, 30, (4, 6))
    w = torch.randn(4, 6, model.config.vocab_size)
    lora = {n: p for n, p in model.named_parameters() if "lora_" in n}
    widths = []
    monkeypatch.setattr(lora_router, "lora_linear",
                        lambda x_, base, A, B, s: widths.append(A.shape[0]) or lora_linear(x_, base, A, B, s))

    def grads(run, rows=None):
        for p in lora.values():
            p.requires_grad_(True)
            p.grad = None
        with run() as set_rows:
            if rows is not None:
                set_rows(torch.tensor(rows))
            logits = model(input_ids=x).logits
        (logits * w).sum().backward()
        out = {n: None if p.grad is None else p.grad.clone() for n, p in lora.items()}
        for p in lora.values():
            p.grad = None
            p.requires_grad_(False)
        return logits.detach(), out

    widths.clear()
    got, got_g = grads(lambda: router.mixed(["a", "b", "c"]), [2, 2, 2, 2])
    assert widths and set(widths) == {2}  # adapter c alone (rank 2), not the 4 + 4 + 2 concatenation
    with torch.no_grad():
        torch.testing.assert_close(got, model(input_ids=x, adapter_names=["c"] * 4).logits, atol=1e-5, rtol=0)
    _, want_g = grads(lambda: router.policy("c"))
    for n, g in want_g.items():
        if ".c." in n:
            torch.testing.assert_close(got_g[n], g, atol=1e-4, rtol=1e-4)
        else:
            assert g is None and got_g[n] is None
    widths.clear()
    grads(lambda: router.mixed(["a", "b", "c"]), [2, 0, 2, 2])
    assert widths and set(widths) == {10}
