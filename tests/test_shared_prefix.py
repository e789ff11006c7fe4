"""The split prompt/completion attention equals one softmax over the concatenated keys."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from rolecall.algo.shared_prefix import PrefixAttention


def _reference(q, kB, vB, kU, vU, prompt_of_B, n_prompt_U, scale):
    """SDPA over [the row's prompt keys (left padding masked), its own keys (causal)]."""
    B, H, T, _ = q.shape
    g, Wp = H // kB.shape[1], kU.shape[2]
    K = torch.cat([kU[prompt_of_B], kB], 2).repeat_interleave(g, 1)
    V = torch.cat([vU[prompt_of_B], vB], 2).repeat_interleave(g, 1)
    mask = torch.zeros(B, 1, T, Wp + T, dtype=torch.bool)
    for b in range(B):
        mask[b, 0, :, Wp - int(n_prompt_U[prompt_of_B[b]]):Wp] = True
        mask[b, 0, :, Wp:] = torch.tril(torch.ones(T, T, dtype=torch.bool))
    return F.scaled_dot_product_attention(q, K, V, attn_mask=mask, scale=scale)


@pytest.mark.parametrize("H,h", [(4, 2), (3, 3), (8, 1)])
def test_split_attention_equals_concatenated_softmax(H, h):
    torch.manual_seed(0)
    B, T, d, U, Wp = 6, 5, 8, 3, 7
    prompt_of_B = torch.tensor([0, 2, 0, 0, 2, 1])  # rows of a prompt not side by side; prompt lengths differ
    n_prompt_U = torch.tensor([7, 1, 4])
    leaves = [torch.randn(B, H, T, d), torch.randn(B, h, T, d), torch.randn(B, h, T, d),
              torch.randn(U, h, Wp, d), torch.randn(U, h, Wp, d)]
    leaves = [x.requires_grad_(True) for x in leaves]
    scale = d ** -0.5
    w = torch.randn(B, H, T, d)
    grads = []
    for fn in (PrefixAttention.apply, _reference):
        out = fn(*leaves, prompt_of_B, n_prompt_U, scale)
        grads.append((out.detach(), torch.autograd.grad((out * w).sum(), leaves)))
    (split, g_split), (ref, g_ref) = grads
    torch.testing.assert_close(split, ref, atol=1e-5, rtol=0)
    for a, b in zip(g_split, g_ref):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    # the prompt keys' padding gets no gradient; real prompt keys do
    assert g_split[3][1, :, :-1].abs().max() == 0 and g_split[3][1, :, -1].abs().max() > 0
