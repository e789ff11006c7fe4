"""`load_dataset`: read a local dataset, validate every row, apply the bad-row policy, split.

Order matters: all rows are validated before splitting, and the split runs over the rows
kept, so `on_bad_row="skip"` never lets a bad row hide in the part you did not look at.
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from rolecall.tasks.files.formats import FORMATS, RowIssue, convert_rows, prompt_checker
from rolecall.tasks.files.readers import DatasetError, read_rows
from rolecall.types import Problem

Format = Literal["dapo_math", "gsm8k", "deepcoder", "qa"]
Split = Literal["train", "test", "all"]


@dataclass
class LoadReport:
    """What loading found: row counts, the bad rows, and which split was returned."""

    path: str
    fmt: str
    n_rows: int
    issues: list[RowIssue] = field(default_factory=list)
    split: str = "all"
    test_fraction: float = 0.0
    split_seed: int = 42
    n_returned: int = 0  # problems handed back, after split and limit
    test_rows: int | None = None  # when set, the held-out rows by count (replaces test_fraction)

    @property
    def n_skipped(self) -> int:
        return len(self.issues)  # one issue per bad row

    @property
    def n_kept(self) -> int:
        return self.n_rows - self.n_skipped

    @property
    def counts(self) -> dict[str, int]:
        """Bad rows per reason, most frequent first."""
        return dict(Counter(i.reason for i in self.issues).most_common())

    def summary(self) -> str:
        text = f"{self.fmt} {Path(self.path).name}: {self.n_rows} rows, {self.n_kept} kept, {self.n_skipped} skipped"
        if self.issues:
            text += " (" + ", ".join(f"{n} {reason}" for reason, n in self.counts.items()) + ")"
        if self.split != "all":
            text += (f"; {self.split} split {self.n_returned} problems "
                     f"({describe_split(self.test_fraction, self.split_seed, self.test_rows)})")
        elif self.n_returned != self.n_kept:
            text += f"; {self.n_returned} returned (limit)"
        return text

    def details(self, max_rows: int = 20) -> str:
        """One line per bad row, the first `max_rows` of them."""
        if not self.issues:
            return "no bad rows"
        lines = [str(i) for i in self.issues[:max_rows]]
        if len(self.issues) > max_rows:
            lines.append(f"... and {len(self.issues) - max_rows} more")
        return "\n".join(lines)


@dataclass
class LoadedDataset:
    problems: list[Problem]
    report: LoadReport


def load_dataset(path: str | Path, fmt: Format, *, split: Split = "all", test_fraction: float = 0.0,
                 split_seed: int = 42, test_rows: int | None = None, source_split: str = "train",
                 on_bad_row: Literal["error", "skip"] = "error", max_prompt_chars: int | None = None,
                 count_tokens: Callable[[str], int] | None = None, max_prompt_tokens: int | None = None,
                 limit: int | None = None) -> LoadedDataset:
    """Load a local dataset file or directory as Problems.

    `source_split` picks the split inside a DatasetDict or hub-snapshot directory; `split` is
    rolecall's own seeded train/test split of the rows kept (`"all"` ignores test_fraction and
    test_rows). `test_rows`, when given, holds out exactly that many rows and replaces
    test_fraction. `limit` keeps the first `limit` problems of the chosen split.
    """
    _check_args(fmt, split, test_fraction, on_bad_row, limit, test_rows)
    too_long = prompt_checker(max_prompt_chars, count_tokens, max_prompt_tokens)
    rows = read_rows(path, split=source_split)
    problems, issues = convert_rows(rows, fmt, too_long)
    report = LoadReport(str(path), fmt, len(rows), issues, split, test_fraction, split_seed, test_rows=test_rows)
    if issues and on_bad_row == "error":
        bad = f"{len(issues)} bad row{'' if len(issues) == 1 else 's'} of {len(rows)}"
        raise DatasetError(f"{path}: {bad} in format {fmt!r} (pass on_bad_row='skip' to drop them):\n"
                           f"{report.details(max_rows=10)}", report)
    if not problems:
        raise DatasetError(f"{path}: no usable rows: {report.summary()}\n{report.details(max_rows=10)}", report)
    if split != "all":
        try:
            train_idx, test_idx = split_indices(len(problems), test_fraction, split_seed, test_rows=test_rows)
        except ValueError as e:
            raise DatasetError(f"{path}: {e}", report) from None
        problems = [problems[i] for i in (train_idx if split == "train" else test_idx)]
        if not problems:
            raise DatasetError(f"{path}: the {split} split is empty ({report.n_kept} rows kept, "
                               f"{_split_knob(test_fraction, test_rows)})", report)
    if limit is not None:
        problems = problems[:limit]
    report.n_returned = len(problems)
    return LoadedDataset(problems, report)


def split_indices(n: int, test_fraction: float, seed: int, *,
                  test_rows: int | None = None) -> tuple[list[int], list[int]]:
    """(train, test) row positions, exactly as `datasets.Dataset.train_test_split(test_size=
    test_fraction, seed=seed)` picks them: a PCG64 permutation, the test rows first.

    `test_rows`, when given, replaces test_fraction: the first `test_rows` positions of the same
    permutation are the test rows, as `train_test_split(test_size=test_rows, seed=seed)` (or
    `shuffle(seed=seed)` and taking the first rows) picks them; it must be less than n.
    test_fraction 0 without test_rows keeps every row in file order as train (datasets refuses
    test_size=0).
    """
    if test_rows is not None:
        if isinstance(test_rows, bool) or not isinstance(test_rows, int) or test_rows < 1:
            raise ValueError(f"test_rows must be a positive integer or None, got {test_rows!r}")
        if test_rows >= n:
            raise ValueError(f"test_rows {test_rows} must be less than the {n} rows kept "
                             f"(it would leave no training rows)")
        n_test = test_rows
    elif test_fraction == 0:
        return list(range(n)), []
    else:
        n_test = math.ceil(test_fraction * n)  # same float expression as datasets, same rounding
    n_train = n - n_test
    perm = np.random.default_rng(seed).permutation(n)
    return perm[n_test:n_test + n_train].tolist(), perm[:n_test].tolist()


PAPER_SPLITS = {("fraction", 0.1, 42): "the paper's math split", ("rows", 1000, 42): "the paper's code split"}


def describe_split(test_fraction: float, seed: int, test_rows: int | None = None) -> str:
    """Which held-out split these settings pick, in words, naming the paper's split when it is one.

    >>> describe_split(0.1, 42)
    "test_fraction 0.1: 10 % of rows held out with seed 42, the paper's math split"
    >>> describe_split(0.1, 42, test_rows=1000)
    "test_rows 1000: the first 1000 rows of a seed-42 shuffle held out, the paper's code split"
    """
    if test_rows is not None:
        text = f"test_rows {test_rows}: the first {test_rows} rows of a seed-{seed} shuffle held out"
        paper = PAPER_SPLITS.get(("rows", test_rows, seed))
    elif test_fraction == 0:
        return "test_fraction 0: no rows held out"
    else:
        text = f"test_fraction {test_fraction}: {test_fraction * 100:g} % of rows held out with seed {seed}"
        paper = PAPER_SPLITS.get(("fraction", test_fraction, seed))
    return f"{text}, {paper}" if paper else text


def _split_knob(test_fraction: float, test_rows: int | None) -> str:
    return f"test_rows {test_rows}" if test_rows is not None else f"test_fraction {test_fraction}"


def _check_args(fmt: str, split: str, test_fraction: float, on_bad_row: str, limit: int | None,
                test_rows: int | None = None) -> None:
    if fmt not in FORMATS:
        raise ValueError(f"unknown dataset format {fmt!r}; allowed: {sorted(FORMATS)}")
    if split not in ("train", "test", "all"):
        raise ValueError(f"split must be 'train', 'test' or 'all', got {split!r}")
    if isinstance(test_fraction, bool) or not isinstance(test_fraction, (int, float)) or not 0 <= test_fraction < 1:
        raise ValueError(f"test_fraction must be in [0, 1), got {test_fraction!r}")
    if test_rows is not None and (isinstance(test_rows, bool) or not isinstance(test_rows, int) or test_rows < 1):
        raise ValueError(f"test_rows must be a positive integer or None, got {test_rows!r}")
    if split == "test" and test_fraction == 0 and test_rows is None:
        raise ValueError("split='test' needs test_fraction > 0 or test_rows (e.g. test_fraction=0.1 for the "
                         "paper's DAPO-Math split, test_rows=1000 for its DeepCoder split)")
    if on_bad_row not in ("error", "skip"):
        raise ValueError(f"on_bad_row must be 'error' or 'skip', got {on_bad_row!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit must be a positive integer or None, got {limit!r}")
