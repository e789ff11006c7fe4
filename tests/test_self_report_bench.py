"""benchmarks/self_report.py's AUROC: the share of (right, wrong) pairs a number ranks right, ties half."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.self_report import auroc  # noqa: E402


def test_auroc_by_hand():
    assert auroc([9, 8], [1, 2]) == 1.0
    assert auroc([1], [9]) == 0.0
    assert auroc([5, 5], [5]) == 0.5          # ties count half
    assert auroc([7, 3], [5]) == 0.5          # one pair each way
    assert auroc([], [1]) is None and auroc([1], []) is None
