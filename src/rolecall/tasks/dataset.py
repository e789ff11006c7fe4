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
    from rolecall.data import load_dataset, split_indices

    if not data.val_path and data.test_fraction <= 0:
        raise ValueError("data.test_fraction is 0 and data.val_path is not set: there would be no validation problems")
    kw = dict(fmt=data.format, source_split=data.source_split, on_bad_row=data.on_bad_row)
    if data.max_prompt_tokens is not None:
        kw.update(count_tokens=count_tokens, max_prompt_tokens=data.max_prompt_tokens)
    # Read and validate the file once; the paper split is taken over the rows kept.
    loaded = load_dataset(data.path, split="all", **kw)
    log(f"train: {loaded.report.summary()}" if data.val_path else f"data: {loaded.report.summary()}")
    if data.val_path:
        train_P = loaded.problems
        val = load_dataset(data.val_path, split="all", **kw)
        log(f"validation: {val.report.summary()}")
        val_P = val.problems
    else:
        train_idx, val_idx = split_indices(len(loaded.problems), data.test_fraction, data.split_seed)
        train_P = [loaded.problems[i] for i in train_idx]
        val_P = [loaded.problems[i] for i in val_idx]
    if data.limit:
        train_P = train_P[: data.limit]
    if data.n_val:
        val_P = val_P[: data.n_val]
    return train_P, val_P
