"""The trainer's forward pass: each distinct prompt once, every completion on its prompt's cache.

Equal, up to float rounding, to running every row's full prompt + completion through the
model, but a group of G samples pays for its prompt once instead of G times. Gradients
reach the prompt's activations through the shared keys and values, so the result is the
same loss and the same gradient. On CPU the rows read their prompt's keys in place
(`train.shared_prefix`); elsewhere through a per-row copy of the prompt's cache.
"""
from __future__ import annotations

from typing import Callable

import torch

from rolecall.algo import shared_prefix
from rolecall.policies.model import last_position


def completion_logits(model, b: dict[str, torch.Tensor],
                      route: Callable[[torch.Tensor, bool], None] | None = None) -> torch.Tensor:
    """Logits [B, Wc, V] whose column j predicts completion token j of each row (see `batch.collate`)."""
    return torch.cat(completion_logit_parts(model, b, route), 1)


def over_parts(parts: list[torch.Tensor], targets_B_T: torch.Tensor, fn: Callable):
    """`fn(logits, targets)` on each column block of `completion_logit_parts`, the results (a
    tensor [B, t] or a tuple of them) joined along the columns: the per-token statistics of
    the whole completion, without joining the vocabulary-wide logits first."""
    outs, start = [], 0
    for z in parts:
        outs.append(fn(z, targets_B_T[:, start:start + z.shape[1]]))
        start += z.shape[1]
    if isinstance(outs[0], tuple):
        return tuple(torch.cat(x, 1) for x in zip(*outs))
    return torch.cat(outs, 1)


def completion_logit_parts(model, b: dict[str, torch.Tensor],
                           route: Callable[[torch.Tensor, bool], None] | None = None) -> list[torch.Tensor]:
    """`completion_logits` as its column blocks: [B, 1, V] from the prompt pass, then [B, Wc - 1, V]
    from the completion pass (when the completion has more than one column). Joining them
    copies every logit once more (88 MB for 19 rows of 47 SmolLM2 tokens in bf16, and its
    gradient split again in the backward); `over_parts` reads them as they are.

    `route(policy_index, new_pass)` is called before each of the two model calls with the
    policy of every row of that call (`policy_of_prompt`, then `policy_of_row`), for a
    forward that mixes policies (`LoraRouter.mixed`); both calls are one forward pass.
    """
    p_attn_U, prompt_of_B = b["prompt_attention_mask"], b["prompt_of_row"]
    if route is not None:
        route(b["policy_of_prompt"], True)
    # Left padding: real prompt tokens sit at positions 0..n-1 whatever the padding.
    p_pos_U = (p_attn_U.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=b["prompt_ids"], attention_mask=p_attn_U, position_ids=p_pos_U, use_cache=True,
                logits_to_keep=last_position(b["prompt_ids"].shape[1], p_attn_U.device))
    first_B = out.logits[:, -1][prompt_of_B]  # the prompt's last token predicts completion token 0
    c_ids_B = b["completion_ids"]
    if c_ids_B.shape[1] == 1:
        return [first_B.unsqueeze(1)]
    cache = out.past_key_values
    n_prompt_U = p_attn_U.sum(-1)
    c_pos_B = n_prompt_U[prompt_of_B].unsqueeze(1) + torch.arange(c_ids_B.shape[1] - 1, device=c_ids_B.device)
    # The last completion token predicts nothing: the completion pass stops one short.
    if route is not None:
        route(b["policy_of_row"], False)
    if shared_prefix.usable(model, c_ids_B.device):
        # Each row reads its prompt's keys in place (see train.shared_prefix).
        with shared_prefix.attending(model, cache, prompt_of_B, n_prompt_U) as no_mask:
            rest = model(input_ids=c_ids_B[:, :-1], attention_mask=no_mask, position_ids=c_pos_B,
                         use_cache=False).logits
    else:
        cache.reorder_cache(prompt_of_B)  # U prompts -> B rows, each row reading its own prompt
        attn_B = torch.cat([p_attn_U[prompt_of_B], b["completion_attention_mask"][:, :-1]], 1)
        rest = model(input_ids=c_ids_B[:, :-1], attention_mask=attn_B, position_ids=c_pos_B,
                     past_key_values=cache, use_cache=True).logits
    return [first_B.unsqueeze(1), rest]
