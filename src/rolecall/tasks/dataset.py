"""Problems from a local dataset file (the `data` config section): train and validation splits."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from rolecall.tasks.files import describe_split, load_dataset, split_indices
from rolecall.tasks.source import TaskSource
from rolecall.types import Problem


def load_dataset_problems(data, count_tokens: Callable[[str], int] | None = None,
                          log: Callable[[str], None] = print) -> tuple[list[Problem], list[Problem]]:
    """(train, validation) from `data.path`, validated row by row before any training.

    Validation comes from `data.val_path` when given, else from the seeded held-out split of
    `data.path`: the first `data.test_rows` rows of a seed-`split_seed` shuffle when test_rows is
    set (the paper's code split: 1000, seed 42), else `data.test_fraction` of the rows (the
    paper's math split: 10 %, seed 42). The load report's summary and the split used go to `log`.
    """

    test_rows = data.test_rows  # DataCfg has checked that some validation source exists
    kw = dict(fmt=data.format, source_split=data.source_split, on_bad_row=data.on_bad_row)
    if data.max_prompt_tokens is not None:
        kw.update(count_tokens=count_tokens, max_prompt_tokens=data.max_prompt_tokens)
    # Read and validate the file once; the held-out split is taken over the rows kept.
    loaded = load_dataset(data.path, split="all", **kw)
    log(f"train: {loaded.report.summary()}" if data.val_path else f"data: {loaded.report.summary()}")
    if data.val_path:
        train_P = loaded.problems
        val = load_dataset(data.val_path, split="all", **kw)
        log(f"validation: {val.report.summary()}")
        val_P = val.problems
    else:
        n = len(loaded.problems)
        if test_rows is not None and test_rows >= n:
            raise ValueError(f"data.test_rows: {test_rows} must be less than the {n} rows kept from {data.path} "
                             f"(it would leave no training rows); lower it or set data.val_path")
        train_idx, val_idx = split_indices(n, data.test_fraction, data.split_seed, test_rows=test_rows)
        train_P = [loaded.problems[i] for i in train_idx]
        val_P = [loaded.problems[i] for i in val_idx]
        log(f"validation: {describe_split(data.test_fraction, data.split_seed, test_rows)} "
            f"({len(val_P)} validation, {len(train_P)} train problems)")
    if data.limit:
        train_P = train_P[: data.limit]
    if data.n_val:
        val_P = val_P[: data.n_val]
    return train_P, val_P


def _problems(cfg, count_tokens=None, log=print):
    return load_dataset_problems(cfg.data, count_tokens, log=log)


def _identity(cfg) -> dict:
    d = cfg.data
    return {"path": str(Path(d.path).resolve()), "val_path": d.val_path and str(Path(d.val_path).resolve()),
            "task": f"dataset {d.format}"}


# Which verifier reads which layout's gold answers.
TASK = TaskSource("dataset", _problems, _identity,
                  formats={"dapo_math": "math", "gsm8k": "math", "deepcoder": "code", "qa": "qa"}, reads_data=True)
