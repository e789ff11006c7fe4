"""Built-in arithmetic task: deterministic disjoint split, correct answers, validated knobs."""
from __future__ import annotations

import re

import pytest

from rolecall.tasks import ArithmeticTask


def test_split_is_deterministic():
    a, b = ArithmeticTask(seed=7, n_val=50), ArithmeticTask(seed=7, n_val=50)
    assert a.validation() == b.validation()
    assert a.train()[:100] == b.train()[:100]


def test_seed_changes_the_split():
    assert ArithmeticTask(seed=1, n_val=50).validation() != ArithmeticTask(seed=2, n_val=50).validation()


def test_train_and_validation_are_disjoint_and_cover_the_space():
    t = ArithmeticTask(digits=2, ops="+-", n_val=200)
    val, train = t.validation(), t.train()
    assert len(val) == 200
    val_ids, train_ids = {p.uid for p in val}, {p.uid for p in train}
    assert not val_ids & train_ids
    assert len(train_ids) == len(train)  # no duplicates
    # 2 digits: 90*90 sums + 90*91/2 non-negative differences
    assert len(val) + len(train) == 90 * 90 + 90 * 91 // 2


def test_answers_are_correct_and_non_negative():
    for p in ArithmeticTask(digits=2, n_val=100).validation():
        a, op, b = re.fullmatch(r"(\d+)([+-])(\d+)", p.prompt).groups()
        assert p.uid == p.prompt
        assert int(p.answer) == (int(a) + int(b) if op == "+" else int(a) - int(b))
        assert int(p.answer) >= 0


@pytest.mark.parametrize("digits,lo,hi", [(1, 0, 9), (2, 10, 99)])
def test_digits_set_operand_size(digits, lo, hi):
    probs = ArithmeticTask(digits=digits, n_val=20).train()
    ops = [tuple(map(int, re.split(r"[+-]", p.prompt))) for p in probs]
    assert all(lo <= a <= hi and lo <= b <= hi for a, b in ops)
    assert min(min(o) for o in ops) == lo and max(max(o) for o in ops) == hi


@pytest.mark.parametrize("ops", ["+", "-"])
def test_ops_restrict_the_operator(ops):
    probs = ArithmeticTask(digits=1, ops=ops, n_val=10).validation() + ArithmeticTask(digits=1, ops=ops, n_val=10).train()
    assert {("+" if "+" in p.prompt else "-") for p in probs} == {ops}


@pytest.mark.parametrize("kw,msg", [({"digits": 0}, "task.digits"), ({"digits": 4}, "task.digits"),
                                    ({"ops": ""}, "task.ops"), ({"ops": "*"}, "task.ops"),
                                    ({"ops": "+x"}, "task.ops"), ({"n_val": 0}, "task.n_val")])
def test_invalid_knobs(kw, msg):
    with pytest.raises(ValueError, match=msg):
        ArithmeticTask(**kw)


def test_n_val_larger_than_the_space():
    """1 digit has 100 sums + 55 differences: 200 validation problems leave none to train on."""
    with pytest.raises(ValueError, match="task.n_val=200 leaves no training problems"):
        ArithmeticTask(digits=1, n_val=200).train()
