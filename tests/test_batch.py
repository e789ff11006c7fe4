"""Training rows: per-policy selection, token-budgeted micro-batches, next-token-aligned collate."""
from __future__ import annotations

import random

import pytest
import torch

from rolecall.train.batch import Row, collate, micro_batches, rows_for_policy
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
        longest = max(len(r.ids) for r in b)
        assert len(b) * longest <= budget or len(b) == 1
    return batches


@pytest.mark.parametrize("budget", [8, 25, 64, 100, 1000])
def test_micro_batches_respect_budget_and_keep_rows(budget):
    rng = random.Random(budget)
    rows = [row(rng.randint(1, 20), rng.randint(1, 20), tag=i) for i in range(40)]
    _check_packing(rows, budget)


def test_oversized_row_gets_its_own_batch():
    rows = [row(3, 2), row(40, 10), row(2, 2), row(3, 3)]
    batches = _check_packing(rows, 20)
    big = [b for b in batches if any(len(r.ids) == 50 for r in b)]
    assert len(big) == 1 and len(big[0]) == 1


def test_micro_batches_pack_greedily():
    """Ten rows of length 10 under a 30-token budget: 3 + 3 + 3 + 1."""
    batches = micro_batches([row(5, 5, tag=i) for i in range(10)], 30)
    assert [len(b) for b in batches] == [3, 3, 3, 1]


def test_micro_batches_empty():
    assert micro_batches([], 10) == []


def test_collate_masks_exactly_the_completion_positions():
    rows = [row(3, 2, tag=1, adv=1.5), row(1, 4, tag=2, adv=-0.5), row(4, 1, tag=3)]
    out = collate(rows, PAD)
    width = 5
    assert out["input_ids"].shape == (3, width)
    assert out["mask"].shape == out["rollout_logp"].shape == out["targets"].shape == (3, width - 1)
    for i, r in enumerate(rows):
        L = len(r.ids)
        expected = torch.zeros(width - 1)
        expected[r.n_prompt - 1: L - 1] = 1  # position j predicts token j+1
        assert torch.equal(out["mask"][i], expected), i
        assert out["mask"][i].sum() == r.n_completion
        # the target at every masked position is a completion token
        masked_targets = out["targets"][i][out["mask"][i].bool()].tolist()
        assert masked_targets == r.ids[r.n_prompt:]
        lp = torch.zeros(width - 1)
        lp[r.n_prompt - 1: L - 1] = torch.tensor(r.rollout_logp)
        assert torch.allclose(out["rollout_logp"][i], lp)
        assert out["attention_mask"][i].tolist() == [1] * L + [0] * (width - L)
        assert out["input_ids"][i].tolist() == r.ids + [PAD] * (width - L)
    assert out["adv"].tolist() == [1.5, -0.5, 0.0]


def test_collate_hand_example():
    r = Row(ids=[11, 12, 13, 21, 22], n_prompt=3, rollout_logp=[-0.5, -1.5], advantage=2.0, role="g", slot="g")
    out = collate([r], PAD)
    assert out["targets"].tolist() == [[12, 13, 21, 22]]
    assert out["mask"].tolist() == [[0, 0, 1, 1]]
    assert out["rollout_logp"].tolist() == [[0.0, 0.0, -0.5, -1.5]]
