"""benchmarks/real_interventions.py: the cell's grid file and the paired effects, by hand."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.real_interventions import ARMS, cell_grid, paired_effects  # noqa: E402


def test_the_cell_grid_keeps_the_real_grids_cell_and_adds_the_arms(tmp_path):
    path = ROOT / "configs" / "grids" / "real.yaml"
    grid = yaml.safe_load(path.read_text())
    spec = cell_grid(grid, path, "voting-isolated", [0, 1, 2])
    assert spec["overrides"]["routing"] == "isolated" and spec["overrides"]["workflow.name"] == "voting"
    assert spec["overrides"]["train.steps"] == grid["overrides"]["train.steps"]  # the same budget
    assert spec["axes"] == {"intervention": ARMS, "seed": [0, 1, 2]} and spec["control"] is False
    with pytest.raises(SystemExit, match="not a cell"):
        cell_grid(grid, path, "debate-isolated", [0])
    # the file it writes is a grid rolecall reads: 2 arms x 3 seeds, nothing else
    from rolecall.grid.spec import load_grid
    f = tmp_path / "g.yaml"
    f.write_text(yaml.safe_dump(spec))
    cells = load_grid(f).cells()
    assert sorted(c.name for c in cells) == sorted(f"{a}-seed{s}" for a in ARMS for s in (0, 1, 2))


def test_paired_effects_by_hand():
    none = {0: {"peak": 0.6, "final": 0.5, "fall": 0.2}, 1: {"peak": 0.7, "final": 0.7, "fall": 0.0},
            2: {"peak": 0.5, "final": 0.3, "fall": 0.25}}
    arm = {0: {"peak": 0.7, "final": 0.7, "fall": 0.0}, 1: {"peak": 0.7, "final": 0.6, "fall": 0.1}}
    out = paired_effects({"kl_anchor": arm}, none)["kl_anchor"]
    assert out["seeds"] == [0, 1]  # seed 2's arm has not run
    assert out["peak"]["values"] == [0.1, 0.0] and out["final"]["values"] == [0.2, -0.1]
    assert out["fall"]["mean"] == pytest.approx(-0.05)
    lo, hi = out["fall"]["ci95"]
    assert lo < -0.05 < hi
    assert paired_effects({"kl_anchor": {0: arm[0]}}, none)["kl_anchor"]["peak"]["ci95"] is None  # one seed
