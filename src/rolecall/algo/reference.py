"""Log-probs of training rows under the base model (every adapter off): the reference of the
KL loss and of the kl_ref diagnostic."""
from __future__ import annotations

import torch

from rolecall.loss import token_logprobs
from rolecall.policies.lora_router import router_for
from rolecall.policies.routing import BASE_POLICY
from rolecall.algo.batch import Row, collate, micro_batches
from rolecall.algo.forward import completion_logit_parts, over_parts


def base_logps(model, rows: list[Row], pad_id: int, temperature: float, max_tokens: int) -> dict[int, torch.Tensor]:
    """Completion-token log-probs of these rows under the base model, by id(row). The base is the
    same for every policy: one no-grad pass over all of them."""
    out: dict[int, torch.Tensor] = {}
    with torch.inference_mode(), router_for(model).policy(BASE_POLICY):
        for mb in micro_batches(rows, max_tokens):
            b = collate(mb, pad_id, model.device)
            logp = over_parts(completion_logit_parts(model, b), b["targets"],
                              lambda z, t: token_logprobs(z, t, temperature))
            for r, x in zip(mb, logp):
                out[id(r)] = x[: r.n_completion]
    return out


def padded_rows(mb: list[Row], by_row: dict[int, torch.Tensor], width: int,
                device: torch.device) -> tuple[torch.Tensor | None, list[int]]:
    """Base log-probs of a micro-batch as [B, width] on `device` (zeros where a row has none),
    and the positions of the rows that have them."""
    picked = [i for i, r in enumerate(mb) if id(r) in by_row]
    if not picked:
        return None, []
    ref = torch.zeros(len(mb), width, device=device)
    for i in picked:
        x = by_row[id(mb[i])]
        ref[i, : len(x)] = x
    return ref, picked
