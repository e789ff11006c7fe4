"""Turn episodes into per-policy training rows and pack rows into token-budgeted micro-batches."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from rolecall.types import Turn


@dataclass
class Row:
    """One turn as the trainer sees it: prompt + completion ids and the completion's facts."""

    ids: list[int]
    n_prompt: int
    rollout_logp: list[float]
    advantage: float
    role: str
    slot: str

    @property
    def n_completion(self) -> int:
        return len(self.ids) - self.n_prompt


def rows_for_policy(turns: list[Turn], advantages: list[float], policy: str) -> list[Row]:
    """The rows a policy trains on: its own turns only, and only ones that produced tokens."""
    rows = []
    for t, a in zip(turns, advantages):
        if t.policy != policy:
            continue
        if len(t.logprobs) != len(t.completion_ids):
            # A zero-filled log-prob would silently corrupt the importance ratio.
            raise ValueError(f"turn {t.slot!r}: engine returned {len(t.logprobs)} log-probs for "
                             f"{len(t.completion_ids)} completion tokens")
        if t.completion_ids:
            rows.append(Row(t.prompt_ids + t.completion_ids, len(t.prompt_ids), list(t.logprobs), a, t.role, t.slot))
    return rows


def micro_batches(rows: list[Row], max_tokens: int) -> list[list[Row]]:
    """Consecutive groups whose padded size (rows x longest row) stays within `max_tokens`.

    Rows are sorted by length first so padding is small; a single row longer than the
    budget still gets a micro-batch of its own (it cannot be split).
    """
    out: list[list[Row]] = []
    cur: list[Row] = []
    for r in sorted(rows, key=lambda r: len(r.ids)):
        if cur and (len(cur) + 1) * len(r.ids) > max_tokens:
            out.append(cur)
            cur = []
        cur.append(r)
    if cur:
        out.append(cur)
    return out


def collate(rows: list[Row], pad_id: int, device: torch.device | str | None = None) -> dict[str, torch.Tensor]:
    """Right-padded tensors on `device`; targets/masks are aligned to next-token prediction (length L-1)."""
    width = max(len(r.ids) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros((len(rows), width - 1))
    rollout = torch.zeros((len(rows), width - 1))
    for i, r in enumerate(rows):
        ids[i, : len(r.ids)] = torch.tensor(r.ids)
        attn[i, : len(r.ids)] = 1
        # Token j+1 is predicted at position j: completion tokens start at n_prompt.
        mask[i, r.n_prompt - 1: len(r.ids) - 1] = 1
        lp = r.rollout_logp[: r.n_completion]
        rollout[i, r.n_prompt - 1: r.n_prompt - 1 + len(lp)] = torch.tensor(lp)
    adv = torch.tensor([r.advantage for r in rows], dtype=torch.float32)
    out = {"input_ids": ids, "attention_mask": attn, "targets": ids[:, 1:], "mask": mask,
           "rollout_logp": rollout, "adv": adv}
    return out if device is None else {k: v.to(device) for k, v in out.items()}
