"""The prompt-sharing forward equals a plain full-sequence forward: logits, loss and gradient."""
from __future__ import annotations

import pytest
import torch

from rolecall.policies.model import attach_adapters, load_base
from rolecall.algo.batch import Row, collate
from rolecall.algo import shared_prefix
from rolecall.algo.forward import completion_logits


def _full_sequence_logits(model, rows, pad_id):
    """Reference: every row's prompt + completion right-padded, logits at the completion positions."""
    width = max(len(r.ids) for r in rows)
    ids = torch.full((len(rows), width), pad_id)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r.ids)] = torch.tensor(r.ids)
        attn[i, : len(r.ids)] = 1
    logits = model(input_ids=ids, attention_mask=attn).logits
    wc = max(r.n_completion for r in rows)
    out = torch.zeros((len(rows), wc, logits.shape[-1]))
    for i, r in enumerate(rows):  # position n_prompt - 1 + j predicts completion token j
        out[i, : r.n_completion] = logits[i, r.n_prompt - 1: len(r.ids) - 1]
    return out


def _rows():
    g = torch.Generator().manual_seed(1)
    tok = lambda n: torch.randint(5, 90, (n,), generator=g).tolist()
    prompts = [tok(9), tok(4), tok(13)]
    rows = []
    for k, n_c in enumerate([3, 1, 6, 2, 5, 4, 1]):  # groups of 3, 2 and 2 samples, uneven lengths
        p = prompts[[0, 0, 0, 1, 1, 2, 2][k]]
        rows.append(Row(p + tok(n_c), len(p), [-1.0] * n_c, (-1.0) ** k * (k + 1) / 4, "r", "r"))
    return rows


@pytest.mark.parametrize("split_attention", [True, False], ids=["prefix-attention", "copied-prompt-keys"])
def test_shared_prompt_forward_matches_full_sequences(tiny_model_dir, monkeypatch, split_attention):
    """Both ways a row reads its prompt: in place (train.shared_prefix, on CPU) and through a
    per-row copy of the prompt's cache (elsewhere)."""
    calls = []
    if split_attention:
        apply = shared_prefix.PrefixAttention.apply
        monkeypatch.setattr(shared_prefix.PrefixAttention, "apply", lambda *a: calls.append(1) or apply(*a))
    else:
        monkeypatch.setattr(shared_prefix, "usable", lambda model, device: False)
    model, tok = load_base(str(tiny_model_dir))
    model = attach_adapters(model, ["a"], r=4, alpha=8, dropout=0.0, target_modules="all-linear")
    torch.manual_seed(0)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.2)
    params = [p for n, p in model.named_parameters() if "lora_" in n]
    for p in params:
        p.requires_grad_(True)
    model.train()
    rows = _rows()
    b = collate(rows, tok.pad_token_id)
    assert b["prompt_ids"].shape[0] == 3 < len(rows)  # prompts really are shared

    def loss_and_grads(logits):
        logp = torch.log_softmax(logits, -1).gather(-1, b["targets"].unsqueeze(-1)).squeeze(-1)
        loss = -(logp * b["mask"] * b["adv"][:, None]).sum()
        grads = torch.autograd.grad(loss, params)
        return logp.detach(), grads

    shared, g_shared = loss_and_grads(completion_logits(model, b))
    full, g_full = loss_and_grads(_full_sequence_logits(model, rows, tok.pad_token_id))
    m = b["mask"] > 0
    assert len(calls) == (model.config.num_hidden_layers if split_attention else 0)
    torch.testing.assert_close(shared[m], full[m], atol=1e-5, rtol=0)
    assert max(float(g.abs().max()) for g in g_full) > 1e-3  # a real gradient, not zeros
    for a, c in zip(g_shared, g_full):
        torch.testing.assert_close(a, c, atol=1e-5, rtol=1e-4)
