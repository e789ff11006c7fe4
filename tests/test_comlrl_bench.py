"""benchmarks/comlrl_compare.py times trainer internals by name: those names must still exist."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def test_every_timed_phase_still_names_a_function():
    from benchmarks.comlrl_compare import phase_targets

    targets = phase_targets()
    assert {key for _, _, key in targets} >= {"prefill", "decode", "train_forward", "kl_ref_base_pass"}
    for owner, name, key in targets:
        assert callable(getattr(owner, name, None)), f"{key}: {owner!r} has no {name!r} any more"
