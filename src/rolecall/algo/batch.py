"""Turn episodes into per-policy training rows and pack rows into token-budgeted micro-batches."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from rolecall.algo.ranks import share_bounds
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
    policy: str = ""  # the adapter that trains on it (rows of several policies can share a forward)

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
            rows.append(Row(t.prompt_ids + t.completion_ids, len(t.prompt_ids), list(t.logprobs), a, t.role, t.slot,
                            policy))
    return rows


def _prompt(r: Row) -> tuple[str, tuple[int, ...]]:
    """A prompt's key: its tokens under its policy (another adapter gives other keys and values)."""
    return r.policy, tuple(r.ids[: r.n_prompt])


def _prompt_order(rows: list[Row]) -> list[tuple[tuple, Row]]:
    """(prompt key, row) by prompt length, prompt, then completion length: the samples of one
    prompt side by side."""
    return sorted(((_prompt(r), r) for r in rows), key=lambda kr: (len(kr[0][1]), kr[0], kr[1].n_completion))


def share_of_rows(rows: list[Row], part: int, parts: int) -> list[Row]:
    """Contiguous share `part` of `parts` of the rows in prompt order (a data-parallel rank's):
    the samples of a prompt stay together except where a cut falls."""
    ordered = [r for _, r in _prompt_order(rows)]
    start, end = share_bounds(len(ordered), part, parts)
    return ordered[start:end]


def padded_cost(rows: list[Row]) -> int:
    """Tokens a micro-batch of these rows runs through the model: each distinct prompt once
    (left-padded to the longest), every completion once (right-padded to the longest)."""
    if not rows:
        return 0
    prompts = {_prompt(r) for r in rows}
    return len(prompts) * max(len(p) for _, p in prompts) + len(rows) * max(r.n_completion for r in rows)


def micro_batches(rows: list[Row], max_tokens: int) -> list[list[Row]]:
    """Consecutive groups whose `padded_cost` stays within `max_tokens`.

    Rows are ordered by prompt (length first) and then completion length, so the samples of
    one prompt land in the same micro-batch and share its forward pass; a single row over
    the budget still gets a micro-batch of its own (it cannot be split).
    """
    # Running totals instead of recomputing `padded_cost` per row (quadratic in rows and
    # prompt length at paper scale). In this order equal prompts are adjacent and the
    # current row has the longest prompt so far.
    out: list[list[Row]] = []
    cur: list[Row] = []
    n_prompts = longest_completion = 0
    prev: tuple | None = None
    for key, r in _prompt_order(rows):
        new = key != prev
        cost = (n_prompts + new) * len(key[1]) + (len(cur) + 1) * max(longest_completion, r.n_completion)
        if cur and cost > max_tokens:
            out.append(cur)
            cur, n_prompts, longest_completion, new = [], 0, 0, True
        cur.append(r)
        n_prompts += new
        longest_completion = max(longest_completion, r.n_completion)
        prev = key
    if cur:
        out.append(cur)
    return out


def collate(rows: list[Row], pad_id: int, device: torch.device | str | None = None,
            width: int | None = None, policies: list[str] | None = None) -> dict[str, torch.Tensor]:
    """Tensors for `train.forward.completion_logits`, each distinct prompt stored once.

    A group's samples share their prompt token for token, so the prompt goes through the
    model once per group and every sample reads its keys and values (8x less prompt work at
    group size 8). `prompt_ids` [U, Wp] are left-padded (the last column is every prompt's
    last token); `prompt_of_row` [B] maps rows to prompts; `completion_ids` [B, Wc] are
    right-padded. `targets`, `mask` and `rollout_logp` are [B, Wc]: column j is completion
    token j. `width` pads the completion columns to at least that many. With `policies`,
    `policy_of_prompt` [U] and `policy_of_row` [B] index each prompt's and row's policy in
    that list (for a forward that mixes policies).
    """
    prompts: dict[tuple, int] = {}
    prompt_of_row = []
    for r in rows:
        if r.n_prompt < 1:
            raise ValueError(f"row of role {r.role!r} has no prompt token: nothing predicts its first completion token")
        prompt_of_row.append(prompts.setdefault(_prompt(r), len(prompts)))
    wp = max(len(p) for _, p in prompts)
    wc = max([r.n_completion for r in rows] + [width or 0, 1])
    cpu = torch.device("cpu")  # built on the host, then moved to `device` in one copy per tensor
    prompt_ids = torch.full((len(prompts), wp), pad_id, dtype=torch.long, device=cpu)
    prompt_attn = torch.zeros((len(prompts), wp), dtype=torch.long, device=cpu)
    for (_, p), u in prompts.items():
        prompt_ids[u, wp - len(p):] = torch.tensor(p, device=cpu)
        prompt_attn[u, wp - len(p):] = 1
    ids = torch.full((len(rows), wc), pad_id, dtype=torch.long, device=cpu)
    mask = torch.zeros((len(rows), wc), device=cpu)
    rollout = torch.zeros((len(rows), wc), device=cpu)
    for i, r in enumerate(rows):
        c = r.ids[r.n_prompt:]
        ids[i, : len(c)] = torch.tensor(c, dtype=torch.long, device=cpu)
        mask[i, : len(c)] = 1
        lp = r.rollout_logp[: len(c)]
        rollout[i, : len(lp)] = torch.tensor(lp, device=cpu)
    out = {"prompt_ids": prompt_ids, "prompt_attention_mask": prompt_attn,
           "prompt_of_row": torch.tensor(prompt_of_row, dtype=torch.long, device=cpu),
           "completion_ids": ids, "completion_attention_mask": mask.long(), "targets": ids, "mask": mask,
           "rollout_logp": rollout, "adv": torch.tensor([r.advantage for r in rows], dtype=torch.float32, device=cpu)}
    if policies is not None:
        index = {p: k for k, p in enumerate(policies)}
        out["policy_of_prompt"] = torch.tensor([index[pol] for pol, _ in prompts], dtype=torch.long, device=cpu)
        out["policy_of_row"] = torch.tensor([index[r.policy] for r in rows], dtype=torch.long, device=cpu)
    return out if device is None else {k: v.to(device) for k, v in out.items()}
