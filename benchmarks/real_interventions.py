"""rolecall's interventions (the paper proposes neither) on one cell of the real grid, paired with the grid's own runs of it.

    rolecall grid configs/grids/real.yaml --out runs/real --record benchmarks/results/real_grid.json   # first: the grid
    python benchmarks/real_interventions.py --choose                 # then: which cell the rule picks
    python benchmarks/real_interventions.py                          # and the interventions on it

rolecall offers two interventions for a failing cell (neither is the paper's: it trains without a
KL penalty): a per-role KL anchor toward the base model and a gradient-coherence regularizer. This
writes a grid file for the one cell (its workflow and routing exactly as
`configs/grids/real.yaml` sets them, with an `intervention` axis of the two arms, seeds 0-2, no
control and no base evaluation), runs it through `rolecall grid --resume` (so it resumes arm by
arm), and records, per seed, each arm minus the real grid's run of the same cell and seed: the
peak, the final and the deepest fall of validation accuracy, and the selecting or judging role's
accuracy minus its best trivial rule at the last validation, with the mean over seeds and its
95 % t interval; and every run's full record as a grid's record keeps it (curve, alarms, role
shapes). The arms' settings are fixed in `ARMS` and in docs/findings.md, written down
before the grid's Isolated-Policy cells ran; the cell is chosen by the rule written there.

Writes benchmarks/results/real_interventions.json with provenance.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from statistics import fmean

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.children import HERE, run_child  # noqa: E402  (after the path fix above)
from benchmarks.provenance import write_result  # noqa: E402
from rolecall.grid.record import run_record  # noqa: E402

GRID = HERE.parent / "configs" / "grids" / "real.yaml"
RESULT = HERE / "results" / "real_interventions.json"
ARMS = {"kl_anchor": {"algo.kl_coef_by_role": {"generator": 0.05}},
        "coherence": {"algo.coherence_lambda": 0.5}}
# Pre-registered: the peak, the final and the deepest fall. Added once the rule had picked a cell
# for its role (rule 2), before any arm finished: the role's accuracy minus its best trivial rule.
STATS = ("peak", "final", "fall", "role_gap")


def cell_grid(grid: dict, grid_path: Path, cell: str, seeds: list) -> dict:
    """The grid file of the interventions on `cell` (`<workflow>-<routing>` of `grid`'s axes)."""
    workflow, _, routing = cell.rpartition("-")
    workflows = grid["axes"]["workflow"]
    if workflow not in workflows or routing not in grid["axes"]["routing"]:
        cells = [f"{w}-{r}" for w in workflows for r in grid["axes"]["routing"]]
        raise SystemExit(f"--cell {cell!r}: not a cell of {grid_path.name}; its cells: {', '.join(cells)}")
    return {"config": str((grid_path.parent / grid["config"]).resolve()),
            "overrides": {**grid.get("overrides", {}), **workflows[workflow], "routing": routing},
            "control": False, "base_eval": False, "method": ["intervention"],
            "axes": {"intervention": ARMS, "seed": seeds}}


def paired_effects(arms: dict[str, dict[int, dict]], none: dict[int, dict]) -> dict:
    """Per arm and statistic: the arm minus none by seed, their mean and 95 % t interval."""
    from rolecall.grid.matching import Paired

    out = {}
    for arm, by_seed in arms.items():
        seeds = sorted(s for s in by_seed if s in none)
        out[arm] = {"seeds": seeds}
        for stat in STATS:
            vals = [by_seed[s][stat] - none[s][stat] for s in seeds
                    if by_seed[s].get(stat) is not None and none[s].get(stat) is not None]
            out[arm][stat] = Paired.of(vals).as_dict()
    return out


def seed_stats(records: list[dict]) -> dict[str, dict]:
    """STATS and the step-0 accuracy of each finished run (`rolecall.grid.record.run_record`), keyed by the
    seed axis's label ("seed0"): the arms' grid and the real grid share the axis."""
    from benchmarks.tables_grid import role_gap

    done = [{**r, "role_gap": role_gap(r.get("rules_at_last_validation") or {})} for r in records if r["status"] == "done"]
    return {str(r["labels"]["seed"]): {k: r.get(k) for k in (*STATS, "base")} for r in done}


def choose_cell(doc: dict) -> tuple[str, str]:
    """The cell the interventions go to, by the rule docs/findings.md fixed before the
    Isolated-Policy cells ran, read off real_grid.json; and why.

    1. The method cell with the most seeds whose validation ENDED at least its cliff margin
       below an earlier peak (peak - final, a cliff not recovered from); ties to the larger mean
       of that fall.
    2. Else the cell whose selecting or judging role falls furthest below its trivial rule at
       the last validation: per seed, the role's accuracy minus the best of its trivial rules
       on the same episodes (`tables_grid.ROLES`), averaged over seeds; only a mean below zero
       counts.
    3. Else the cell with the lowest mean peak gain over its own step 0.
    """
    from benchmarks.tables_grid import role_gap
    from rolecall.grid.tables import CLIFF_MARGIN

    cells: dict[str, list[dict]] = {}
    for r in doc["runs"]:
        if r["kind"] == "run" and r["status"] == "done":
            labels = r.get("labels") or {}
            cells.setdefault(f"{labels.get('workflow')}-{labels.get('routing')}", []).append(r)
    if not cells:
        raise SystemExit("no finished method cell in the grid's record: run `rolecall grid configs/grids/real.yaml --record ...` first")
    ended_below = {c: [r["peak"] - r["final"] for r in runs
                       if r["peak"] - r["final"] >= r.get("cliff_margin", CLIFF_MARGIN) - 1e-12]
                   for c, runs in cells.items()}
    best = max(cells, key=lambda c: (len(ended_below[c]), fmean(ended_below[c]) if ended_below[c] else 0.0))
    if ended_below[best]:
        return best, (f"rule 1: {len(ended_below[best])} seed(s) ended at least the cliff margin below an earlier "
                      f"peak (mean fall {fmean(ended_below[best]):.2f})")
    below = {}
    for c, runs in cells.items():
        gaps = [g for r in runs if (g := role_gap(r.get("rules_at_last_validation") or {})) is not None]
        if gaps:
            below[c] = fmean(gaps)
    worst = min(below, key=below.get, default=None)
    if worst is not None and below[worst] < 0:
        return worst, f"rule 2: its role is {-below[worst]:.3f} below the best trivial rule on average"
    gains = {c: fmean(r["peak"] - r["base"] for r in runs) for c, runs in cells.items()}
    low = min(gains, key=gains.get)
    return low, f"rule 3: no cell ended below its peak by the margin nor has a role below its rule; lowest mean peak gain ({gains[low]:+.2f})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cell", default=None, help="the real grid's cell, <workflow>-<routing>: voting-isolated, ... "
                    "(default: the cell the pre-registered rule picks from --grid-result)")
    ap.add_argument("--grid-result", type=Path, default=HERE / "results" / "real_grid.json",
                    help="the real grid's record, which the rule reads")
    ap.add_argument("--choose", action="store_true", help="print the cell the rule picks, and why, and stop")
    ap.add_argument("--grid", type=Path, default=GRID)
    ap.add_argument("--grid-dir", type=Path, default=Path("runs/real"), help="the real grid's directory")
    ap.add_argument("--out-dir", type=Path, default=None, help="default: runs/real_interventions_<cell>")
    ap.add_argument("--collect-only", action="store_true")
    ap.add_argument("--result", type=Path, default=RESULT)
    args = ap.parse_args(argv)
    if args.cell is None or args.choose:
        if not args.grid_result.is_file():
            raise SystemExit(f"--grid-result {args.grid_result}: no such file; record the grid first "
                             "(`rolecall grid record`), or name the cell with --cell")
        cell, why = choose_cell(json.loads(args.grid_result.read_text()))
        print(f"the rule picks {cell}: {why}")
        if args.choose:
            return 0
        args.cell = args.cell or cell
    grid = yaml.safe_load(args.grid.read_text())
    out = args.out_dir or Path(f"runs/real_interventions_{args.cell}")
    spec = cell_grid(grid, args.grid, args.cell, grid["axes"]["seed"])
    if not args.collect_only:
        out.mkdir(parents=True, exist_ok=True)
        spec_path = out.parent / f"{out.name}.grid.yaml"
        spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
        resume = ["--resume"] if (out / "grid.json").is_file() else []
        run_child([sys.executable, "-m", "rolecall", "grid", str(spec_path.resolve()), "--out", str(out), *resume],
                  cwd=HERE.parent)
    from rolecall.grid import tables
    from rolecall.policies.model import resolve_model_dir

    workflow, _, routing = args.cell.rpartition("-")
    base, arms_g = tables.load(args.grid_dir), tables.load(out)
    records = {"none": [run_record(r) for r in base.runs if r.kind == "run"
                        and r.labels.get("workflow") == workflow and r.labels.get("routing") == routing]}
    records.update({arm: [run_record(r) for r in arms_g.runs if r.labels.get("intervention") == arm]
                    for arm in ARMS})
    none = seed_stats(records["none"])
    arms = {arm: seed_stats(records[arm]) for arm in ARMS}
    doc = {"cell": args.cell, "grid_dir": str(args.grid_dir), "out_dir": str(out), "arms": ARMS, "grid": spec,
           "none": none, "runs": arms, "effects": paired_effects(arms, none), "records": records}
    write_result(args.result, doc, model_dir=resolve_model_dir("smollm2-135m"))
    print(f"wrote {args.result}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
