"""The MPDF tables ("Learning to Deliberate"): the trained meta-policy beside majority vote, the
fixed policies, its supervised bootstrap and the oracle, seed by seed and paired, and the
PERSIST / REFINE / CONCEDE rates it learned. Read from `benchmarks/deliberation.py`'s records;
rendered into the docs by `python -m benchmarks.tables`."""
from __future__ import annotations

import json
from pathlib import Path
from statistics import fmean

from benchmarks.deliberation import rounds_in
from benchmarks.tables_grid import DETECTABLE, interval, recorded

RESULTS = Path(__file__).resolve().parent / "results"
REAL = RESULTS / "deliberation_smollm2-deliberation.json"
REAL_SEEDS = 3  # the seeds the comparison is run over (the benchmark's default)
DELIBERATORS = [("persist", "always PERSIST (majority of the first answers)"), ("refine", "always REFINE"),
                ("concede", "always CONCEDE"), ("sft", "supervised bootstrap (π_sft)"),
                ("trained", "**SoftRankPO**"), ("oracle", "oracle (knows the answer; a ceiling)")]
ACTIONS = ("persist", "refine", "concede")


def _missing() -> str:
    return ("_No record yet: `python benchmarks/deliberation.py --config configs/real/smollm2-deliberation.yaml "
            "--out runs/mpdf --resume` runs it._\n")


def mpdf_real() -> str:
    """Validation accuracy of each deliberator per seed, the mean, and the trained policy minus
    each other deliberator paired by seed with its 95 % t interval."""
    if not REAL.is_file():
        return _missing()
    doc = json.loads(REAL.read_text())
    runs = doc["runs"]
    rows = ["| deliberator | " + " | ".join(f"seed {r['seed']}" for r in runs)
            + " | mean | SoftRankPO − this, paired by seed |", "|---" * (len(runs) + 3) + "|"]
    for key, label in DELIBERATORS:
        accs = [r["validation"][key]["accuracy"] for r in runs]
        pair = "–" if key == "trained" else interval(doc["trained_minus"].get(key) or {})
        rows.append(f"| {label} | " + " | ".join(f"{a:.2f}" for a in accs) + f" | {doc['mean_accuracy'][key]:.3f} | {pair} |")
    return "\n".join(rows) + (f"\n\n{len(runs)} of {REAL_SEEDS} seeds; validation accuracy on the config's `task.n_val` "
                              f"problems; intervals are 95 % t over the seeds; {DETECTABLE} From {recorded(doc, REAL)}.\n")


def mpdf_real_actions() -> str:
    """Per round, the share of each action the trained policy takes on validation: at SoftRankPO's
    first evaluation (the bootstrap's choices) and at its last, mean over the seeds."""
    if not REAL.is_file():
        return _missing()
    runs = json.loads(REAL.read_text())["runs"]
    curves = [r["action_curve"] for r in runs if r.get("action_curve")]
    if not curves:
        return "_The record holds no action curves._\n"
    rounds = rounds_in(curves)
    rows = ["| round | " + " | ".join(f"{a.upper()}: first → last" for a in ACTIONS) + " |",
            "|---" * (len(ACTIONS) + 1) + "|"]
    for t in rounds:
        cells = []
        for a in ACTIONS:
            ends = []
            for i in (0, -1):
                vals = [c[i][f"round{t}_{a}"] for c in curves if c[i].get(f"round{t}_{a}") is not None]
                ends.append(f"{fmean(vals):.2f}" if vals else "–")
            cells.append(" → ".join(ends))
        rows.append(f"| {t + 1} | " + " | ".join(cells) + " |")
    steps = sorted({c[-1]["softrank_step"] for c in curves})
    return "\n".join(rows) + (f"\n\nSoftRankPO step 0 → {', '.join(map(str, steps))}, greedy on validation, mean of "
                              f"{len(curves)} seed{'s' if len(curves) > 1 else ''}; the whole curve is `docs/img/deliberation_smollm2-deliberation_actions.svg`.\n")
