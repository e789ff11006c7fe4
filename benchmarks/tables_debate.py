"""The MAPoRL tables: debate on SmolLM2 co-trained, beside frozen peers, and without the
incentives (`configs/grids/real_debate.yaml`, recorded by `rolecall grid ... --record` into
`results/real_debate.json`), each read against the single-agent control of the paper's matrix
(`configs/grids/real.yaml`, `results/real_grid.json`): same task, same problems, same seeds.
Rendered into the docs by `python -m benchmarks.tables`."""
from __future__ import annotations

import json
from pathlib import Path

from benchmarks.tables_grid import DETECTABLE, interval, recorded, spread

RESULTS = Path(__file__).resolve().parent / "results"
DEBATE, MATRIX = RESULTS / "real_debate.json", RESULTS / "real_grid.json"
# (label on the grid's `training` axis, what the docs call the arm)
ARMS = (("co_trained", "co-trained (every agent its own LoRA, incentives on)"),
        ("frozen_peers", "one agent trained beside two frozen base peers"),
        ("co_trained_plain", "co-trained, incentives off"))
CONTROL = "single-agent control (the matrix's)"
# (pair, what it asks): the paper's claim first
PAIRS = (("co_trained", "frozen_peers"), ("co_trained", "co_trained_plain"), ("co_trained", "control"),
         ("frozen_peers", "control"), ("co_trained_plain", "control"))
MATCHED = (("problems", "equal problems"), ("generated_tokens", "equal generated tokens"),
           ("wall_seconds", "equal wall time"))
ROUNDS = ("debate/round0_acc", "debate/round1_acc")


def _runs() -> tuple[dict | None, dict[str, dict[str, dict]]]:
    """The debate record and the finished runs by arm (the control's from the matrix), then by seed."""
    if not DEBATE.is_file():
        return None, {}
    doc = json.loads(DEBATE.read_text())
    out: dict[str, dict[str, dict]] = {}
    for run in doc["runs"]:
        arm = (run.get("labels") or {}).get("training")
        if run["kind"] == "run" and run["status"] == "done" and arm and run.get("curve"):
            out.setdefault(arm, {})[run["labels"].get("seed", "")] = run
    if MATRIX.is_file():
        for run in json.loads(MATRIX.read_text())["runs"]:
            if run["kind"] == "control" and run["status"] == "done" and run.get("curve"):
                out.setdefault("control", {})[(run.get("labels") or {}).get("seed", "")] = run
    return doc, out


def _val(run: dict, key: str, i: int) -> float | None:
    """`key` at the run's first (i = 0) or last (i = -1) validation; accuracy from the curve, which
    every record holds (the matrix's was recorded before records kept each validation's metrics)."""
    if key == "accuracy":
        return run["curve"][i]["accuracy"]
    vals = run.get("validations") or [{}]
    return vals[i].get(key)


def _gain(run: dict) -> float:
    return _val(run, "accuracy", -1) - _val(run, "accuracy", 0)


def _col(runs: dict[str, dict], key: str, i: int) -> str:
    return spread([x for r in runs.values() if (x := _val(r, key, i)) is not None])


def maporl_arms() -> str:
    """Per arm: seeds done, validation accuracy from step 0 to the last validation and its peak,
    each round's accuracy at the last validation (does the second round improve on the first?)
    and how often an agent's answer went wrong → right and right → wrong between rounds."""
    doc, by_arm = _runs()
    if doc is None:
        return ("_No MAPoRL grid recorded yet: `rolecall grid configs/grids/real_debate.yaml --out runs/real_debate "
                "--record benchmarks/results/real_debate.json` runs it._\n")
    seeds = next((len(a["labels"]) for a in doc.get("axes") or [] if a.get("role") == "seed"), "?")
    rows = ["| arm | seeds done | accuracy: step 0 → last | peak | round 0 → round 1 at the last validation "
            "| wrong → right / right → wrong |", "|---|---|---|---|---|---|"]
    for arm, name in (*ARMS, ("control", CONTROL)):
        runs = by_arm.get(arm, {})
        peak = spread([r["peak"] for r in runs.values() if r.get("peak") is not None])
        debate = arm != "control" and runs
        rounds = f"{_col(runs, ROUNDS[0], -1)} → {_col(runs, ROUNDS[1], -1)}" if debate else "–"
        flips = f"{_col(runs, 'debate/fixed', -1)} / {_col(runs, 'debate/broken', -1)}" if debate else "–"
        rows.append(f"| {name} | {len(runs)} of {seeds} | {_col(runs, 'accuracy', 0)} → {_col(runs, 'accuracy', -1)} "
                    f"| {peak} | {rounds} | {flips} |")
    return "\n".join(rows) + f"\n\nFrom {recorded(doc, DEBATE)}; the control's runs from `benchmarks/results/" \
                              f"{MATRIX.name}`. Ranges are over seeds.\n"


def _points(run: dict) -> list[tuple[dict[str, float], float]]:
    """The run's recorded curve as `rolecall.grid.matching` reads one: (cumulative costs, accuracy)."""
    return [({k: v for k, v in p.items() if k != "accuracy"}, p["accuracy"]) for p in run["curve"]]


def maporl_paired() -> str:
    """Each pair of arms, paired by seed, with its 95 % t interval: at the last validation, at
    equal problems, generated tokens and training wall time (`rolecall.grid.matching`: each run's
    last validation within the cheaper run's total), and in accuracy gained over its own step 0."""
    from rolecall.grid.matching import Paired, pair_difference

    doc, by_arm = _runs()
    if doc is None:
        return "_No MAPoRL grid recorded yet._\n"
    names = {**dict(ARMS), "control": CONTROL}
    rows = ["| paired by seed | seeds paired | last validation | " + " | ".join(label for _, label in MATCHED)
            + " | gained over its own step 0 |", "|---|---|---|" + "---|" * (len(MATCHED) + 1)]
    for a, b in PAIRS:
        pairs = [(r, by_arm[b][seed]) for seed, r in by_arm.get(a, {}).items() if seed in by_arm.get(b, {})]
        cols = [[_val(r, "accuracy", -1) - _val(o, "accuracy", -1) for r, o in pairs]]
        cols += [[d for r, o in pairs if (d := pair_difference(_points(r), _points(o), m)) is not None]
                 for m, _ in MATCHED]
        cols.append([_gain(r) - _gain(o) for r, o in pairs])
        rows.append(f"| {names[a]} − {names[b]} | {len(pairs)} | "
                    + " | ".join(interval(Paired.of(c).as_dict()) for c in cols) + " |")
    return "\n".join(rows) + f"\n\nFrom {recorded(doc, DEBATE)} and `benchmarks/results/{MATRIX.name}`. " \
                             f"Intervals are 95 % t over the paired seeds; {DETECTABLE}\n"
