"""Problems from a local dataset file (the `data` config section): train and validation splits."""
from __future__ import annotations

from typing import Callable

from rolecall.types import Problem


def load_dataset_problems(data, count_tokens: Callable[[str], int] | None = None,
                          log: Callable[[str], None] = print) -> tuple[list[Problem], list[Problem]]:
    """(train, validation) from `data.path`, validated row by row before any training.

    Validation comes from `data.val_path` when given, else from the seeded held-out split of
    `data.path` (paper: 10 %, seed 42). The load report's one-line summary goes to `log`.
    """
    from rolecall.data import load_dataset

    if not data.val_path and data.test_fraction <= 0:
        raise ValueError("data.test_fraction is 0 and data.val_path is not set: there would be no validation problems")
    kw = dict(fmt=data.format, source_split=data.source_split, on_bad_row=data.on_bad_row, limit=data.limit)
    if data.max_prompt_tokens is not None:
        kw.update(count_tokens=count_tokens, max_prompt_tokens=data.max_prompt_tokens)
    if data.val_path:
        train = load_dataset(data.path, split="all", **kw)
        val = load_dataset(data.val_path, split="all", **kw)
    else:
        split = dict(test_fraction=data.test_fraction, split_seed=data.split_seed)
        train = load_dataset(data.path, split="train", **split, **kw)
        val = load_dataset(data.path, split="test", **split, **kw)
    log(f"train: {train.report.summary()}")
    if data.val_path:
        log(f"validation: {val.report.summary()}")
    val_P = val.problems[: data.n_val] if data.n_val else val.problems
    return train.problems, val_P
