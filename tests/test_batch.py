"""Training rows: per-policy selection, token-budgeted micro-batches, prompt-sharing collate."""
from __future__ import annotations

import random

import pytest
import torch

from rolecall.algo.batch import Row, collate, micro_batches, padded_cost, rows_for_policy
from rolecall.types import Turn

PAD = 0


def row(n_prompt: int, n_completion: int, tag: int = 0, adv: float = 0.0) -> Row:
    ids = [100 + tag] * n_prompt + [200 + tag + j for j in range(n_completion)]
    return Row(ids=ids, n_prompt=n_prompt, rollout_logp=[-(j + 1) / 10 for j in range(n_completion)],
               advantage=adv, role="r", slot="s")


def test_rows_for_policy_keeps_own_turns_with_tokens():
    turns = [Turn("generator", "generator0", "g", "", "", prompt_ids=[1, 2], completion_ids=[3], logprobs=[-0.1]),
             Turn("aggregator", "aggregator", "a", "", "", prompt_ids=[1], completion_ids=[4, 5], logprobs=[-1, -2]),
             Turn("generator", "generator1", "g", "", "", prompt_ids=[1], completion_ids=[]),  # empty
             Turn("generator", "generator2", "g", "", "", prompt_ids=[9], completion_ids=[8, 7], logprobs=[-3, -4])]
    rows = rows_for_policy(turns, [0.5, 1.0, 2.0, -0.5], "g")
    assert [(r.ids, r.n_prompt, r.rollout_logp, r.advantage, r.slot) for r in rows] == [
        ([1, 2, 3], 2, [-0.1], 0.5, "generator0"), ([9, 8, 7], 1, [-3, -4], -0.5, "generator2")]
    assert rows[1].n_completion == 2


def _check_packing(rows, budget):
    batches = micro_batches(rows, budget)
    flat = [id(r) for b in batches for r in b]
    assert sorted(flat) == sorted(id(r) for r in rows)  # every row exactly once
    for b in batches:
        assert padded_cost(b) <= budget or len(b) == 1
    return batches


def test_padded_cost_counts_each_distinct_prompt_once():
    same = [row(10, n, tag=0) for n in (2, 5, 3)]  # one prompt of 10, completions up to 5
    assert padded_cost(same) == 10 + 3 * 5
    assert padded_cost(same + [row(4, 1, tag=1)]) == 2 * 10 + 4 * 5
    assert padded_cost([]) == 0


@pytest.mark.parametrize("budget", [8, 25, 64, 100, 1000])
def test_micro_batches_respect_budget_and_keep_rows(budget):
    rng = random.Random(budget)
    rows = [row(rng.randint(1, 20), rng.randint(1, 20), tag=i % 7) for i in range(40)]
    _check_packing(rows, budget)


def test_oversized_row_gets_its_own_batch():
    rows = [row(3, 2), row(40, 10, tag=1), row(2, 2, tag=2), row(3, 3)]
    batches = _check_packing(rows, 20)
    big = [b for b in batches if any(len(r.ids) == 50 for r in b)]
    assert len(big) == 1 and len(big[0]) == 1


def test_micro_batches_pack_greedily():
    """Ten rows of 5 + 5 tokens with distinct prompts under a 30-token budget: 3 + 3 + 3 + 1."""
    batches = micro_batches([row(5, 5, tag=i) for i in range(10)], 30)
    assert [len(b) for b in batches] == [3, 3, 3, 1]


def test_micro_batches_keep_a_group_together():
    """Eight samples of one prompt cost the prompt once: 20 + 8 x 5 = 60 fits a 60 budget."""
    rows = [row(20, 5, tag=0) for _ in range(8)] + [row(20, 5, tag=1) for _ in range(8)]
    batches = micro_batches(rows, 60)
    assert [len(b) for b in batches] == [8, 8]
    assert all(len({tuple(r.ids[:20]) for r in b}) == 1 for b in batches)


def test_micro_batches_empty():
    assert micro_batches([], 10) == []


def test_collate_shares_prompts_and_aligns_completion_tokens():
    rows = [row(3, 2, tag=1, adv=1.5), row(1, 4, tag=2, adv=-0.5), row(3, 1, tag=1), row(4, 1, tag=3)]
    out = collate(rows, PAD)
    # Distinct prompts once each, left-padded to the longest (4).
    assert out["prompt_ids"].tolist() == [[PAD, 101, 101, 101], [PAD, PAD, PAD, 102], [103, 103, 103, 103]]
    assert out["prompt_attention_mask"].tolist() == [[0, 1, 1, 1], [0, 0, 0, 1], [1, 1, 1, 1]]
    assert out["prompt_of_row"].tolist() == [0, 1, 0, 2]
    width = 4  # longest completion
    assert out["completion_ids"].shape == out["mask"].shape == out["rollout_logp"].shape == (4, width)
    for i, r in enumerate(rows):
        c = r.ids[r.n_prompt:]
        assert out["completion_ids"][i].tolist() == c + [PAD] * (width - len(c))
        assert out["mask"][i].tolist() == [1] * len(c) + [0] * (width - len(c))
        assert out["completion_attention_mask"][i].tolist() == [1] * len(c) + [0] * (width - len(c))
        assert torch.allclose(out["rollout_logp"][i], torch.tensor(r.rollout_logp + [0.0] * (width - len(c))))
    assert torch.equal(out["targets"], out["completion_ids"])
    assert out["adv"].tolist() == [1.5, -0.5, 0.0, 0.0]


def test_collate_hand_example_and_width():
    r = Row(ids=[11, 12, 13, 21, 22], n_prompt=3, rollout_logp=[-0.5, -1.5], advantage=2.0, role="g", slot="g")
    out = collate([r], PAD, width=3)
    assert out["targets"].tolist() == [[21, 22, PAD]]
    assert out["mask"].tolist() == [[1, 1, 0]]
    assert out["rollout_logp"].tolist() == [[-0.5, -1.5, 0.0]]
    with pytest.raises(ValueError, match="no prompt token"):
        collate([Row([5, 6], 0, [-1.0, -1.0], 0.0, "g", "g")], PAD)
