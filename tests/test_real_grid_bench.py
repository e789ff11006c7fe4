"""benchmarks/real_grid.py's slow_steps: a step slowed by other work on the machine stands out from
its neighbours; a slow phase of the run itself (long early replies) does not."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.real_grid import slow_steps  # noqa: E402


def test_slow_steps_by_hand():
    rows = [{"step": s, "time/step_s": 28.0 if s <= 8 else 16.0} for s in range(1, 31)]
    rows[19]["time/step_s"] = 100.0                 # step 20: something else took a core
    rows.insert(24, {"step": 25, "time/step_s": 50.0})  # step 25 logged twice (a resume): the last row counts
    rows.append({"step": 12, "event": "alarm"})     # events are not steps
    rows.append({"step": 10, "val/accuracy": 0.5})  # nor validations
    out = slow_steps(rows)
    assert out == {"steps": [20], "excess_s": 84.0, "total_s": 8 * 28.0 + 22 * 16.0 + 84.0}
    assert slow_steps([]) == {"steps": [], "excess_s": 0.0, "total_s": 0.0}
