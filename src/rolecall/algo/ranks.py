"""What the update needs of data parallelism, given to it from above: a `Ranks` object (the
trainer passes `rolecall.distributed.data_parallel.DataParallel`, or None for one process) and
how a list is cut into the ranks' contiguous shares."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol


def share_bounds(n: int, part: int, parts: int) -> tuple[int, int]:
    """[start, end) of contiguous share `part` of `parts` over n items (sizes differ by at most one)."""
    return round(part * n / parts), round((part + 1) * n / parts)


class Ranks(Protocol):
    """The ranks of a data-parallel run, as the update uses them."""

    rank: int
    world: int

    def gather(self, items: list) -> list: ...

    def per_row(self, rows: list, compute: Callable[[list], dict], device: Any) -> dict: ...

    def sum_grads(self, params: list) -> None: ...

    def sum_float(self, value: float) -> float: ...

    def all_true(self, flag: bool) -> bool: ...
