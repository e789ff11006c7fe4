"""The real-model grid's tables (`rolecall grid configs/grids/real.yaml --record results/real_grid.json`), for
docs/findings.md: the cells over seeds, each cell against the single-agent control at matched
cost, the selecting and judging roles against trivial rules, each role's reply length and
gradient share (Shared-Policy capture), the interventions tried on one cell
(results/real_interventions.json), and DAC's arms on search_answer
(results/real_search_answer.json, for docs/search_answer.md). Registered in
benchmarks/tables.py like every other generated table."""
from __future__ import annotations

import json
from pathlib import Path
from statistics import fmean

from benchmarks.provenance import provenance_of
from rolecall.grid.record_table import code_note, kept_note
from rolecall.grid.record_table import detectable  # the product's: one formula for every table

RESULT = Path(__file__).resolve().parent / "results" / "real_grid.json"
# (validation key, what the role is measured against, the trivial rules it is read against)
ROLES = (("voting/selection_acc", "aggregator's pick", ("voting/rule_first_acc", "voting/rule_majority_acc")),
         ("eval_opt/evaluator_accuracy", "evaluator's verdict", ("eval_opt/rule_always_correct_acc",)))
RULE_NAMES = {"voting/rule_first_acc": "always the first", "voting/rule_majority_acc": "the majority",
              "eval_opt/rule_always_correct_acc": "always \"correct\""}


def role_gap(rules: dict) -> float | None:
    """A run's selecting or judging role at its last validation (`rules_at_last_validation`):
    its accuracy minus the best of its trivial rules on the same episodes; None where the run
    has no such role."""
    for key, _, names in ROLES:
        best = [rules[k] for k in names if rules.get(k) is not None]
        if rules.get(key) is not None and best:
            return rules[key] - max(best)
    return None


def _doc() -> dict | None:
    return json.loads(RESULT.read_text()) if RESULT.is_file() else None


def _cell(run: dict) -> str:
    if run["kind"] == "control":
        return "single-agent control"
    if run["kind"] == "long_control":
        return "single-agent control, 1,200 steps"
    if run["kind"] == "base":
        return "base (untrained)"
    labels = run.get("labels") or {}
    return " ".join(str(v) for k, v in labels.items() if k != "seed")


def _groups(doc: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for run in doc["runs"]:
        out.setdefault(_cell(run), []).append(run)
    return out


def spread(values: list[float], fmt: str = ".2f") -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:{fmt}}"
    return f"{fmean(values):{fmt}} ({min(values):{fmt}}–{max(values):{fmt}})"


def _missing(what: str) -> str:
    return f"_No {what} recorded yet: `rolecall grid configs/grids/real.yaml --record benchmarks/results/real_grid.json` runs the grid._\n"


DETECTABLE = ("\"detectable ≥\" is the smallest paired difference the seeds could detect with 80 % power "
              "(rolecall.compare.stats).")


def interval(p: dict) -> str:
    """`mean [lo, hi], detectable ≥ x`: the paired mean, its 95 % t interval and its 80 %-power detectable effect."""
    if not p or p.get("mean") is None:
        return "–"
    ci = p.get("ci95")
    mde = detectable(p.get("values") or [])
    tail = f" [{ci[0]:+.2f}, {ci[1]:+.2f}]" if ci else " (one seed, no interval)"
    return f"{p['mean']:+.2f}{tail}" + (f", detectable ≥ {mde:.2f}" if mde is not None else "")


def _shape_of(run: dict, role: str, key: str, i: int) -> float | None:
    """`role_shapes[role][key][i]` (0: first ten steps, 1: last ten) of a finished run, else None."""
    if run["status"] != "done":
        return None
    return ((run.get("role_shapes") or {}).get(role) or {}).get(key, [None, None])[i]


def _shape(runs: list[dict], role: str, key: str, i: int) -> list[float]:
    return [v for r in runs if (v := _shape_of(r, role, key, i)) is not None]


def _method(run: dict) -> dict:
    return {k: v for k, v in (run.get("labels") or {}).items() if k not in ("seed", "routing")}


def _last_len_by_seed(runs: list[dict], role: str) -> dict:
    return {(r.get("labels") or {}).get("seed"): v for r in runs if (v := _shape_of(r, role, "len_p50", 1)) is not None}


def _shared_minus_isolated(groups: dict[str, list[dict]], runs: list[dict], role: str) -> str:
    """The last ten steps' reply length, this Shared-Policy cell minus the Isolated-Policy cell
    of the same workflow, paired by seed, with its 95 % t interval."""
    from rolecall.grid.matching import Paired

    if (runs[0].get("labels") or {}).get("routing") != "shared":
        return "–"
    twin = next((rs for rs in groups.values()
                 if (rs[0].get("labels") or {}).get("routing") == "isolated" and _method(rs[0]) == _method(runs[0])), [])
    shared, isolated = _last_len_by_seed(runs, role), _last_len_by_seed(twin, role)
    diffs = [shared[seed] - isolated[seed] for seed in shared if seed in isolated]
    if not diffs:
        return "–"
    p = Paired.of(diffs).as_dict(2)
    ci = f" [{p['ci95'][0]:+.1f}, {p['ci95'][1]:+.1f}]" if p["ci95"] else " (one seed)"
    return f"{p['mean']:+.1f}{ci} ({p['n']} seeds)"


def real_grid_role_shapes() -> str:
    """Each role's median reply length and share of its policy's gradient, over the first and
    the last ten training steps (means over seeds, ranges in brackets), and for a Shared-Policy
    cell its last-ten length minus the Isolated-Policy cell's, paired by seed: the paper's
    signature of a shared policy captured by its dominant role."""
    doc = _doc()
    if doc is None:
        return _missing("grid")
    groups = {n: rs for n, rs in _groups(doc).items() if rs[0]["kind"] == "run"}
    rows = ["| cell | role | reply length (median tokens), first 10 steps → last 10 | share of the policy's gradient, "
            "first → last | length, shared − isolated (last 10, paired by seed) |", "|---|---|---|---|---|"]
    for name, runs in groups.items():
        roles = sorted({role for r in runs if r["status"] == "done" for role in (r.get("role_shapes") or {})})
        for role in roles:
            length = f"{spread(_shape(runs, role, 'len_p50', 0), '.1f')} → {spread(_shape(runs, role, 'len_p50', 1), '.1f')}"
            first, last = _shape(runs, role, "grad_share", 0), _shape(runs, role, "grad_share", 1)
            share = "its own policy" if first and min(first + last) > 0.999 else f"{spread(first)} → {spread(last)}"
            rows.append(f"| {name} | {role} | {length} | {share} | {_shared_minus_isolated(groups, runs, role)} |")
    if len(rows) == 2:
        return _missing("role shape")
    return "\n".join(rows) + "\n\n" + _note(doc) + "\n"


INTERVENTIONS = RESULT.with_name("real_interventions.json")
EFFECTS = (("peak", "peak"), ("final", "final"), ("fall", "deepest fall"), ("role_gap", "role − best trivial rule"))


def real_interventions() -> str:
    """rolecall's interventions (the paper proposes neither) on the cell the rule picked: each arm's runs over seeds (and
    the grid's own runs of the cell, "none"), then each arm minus none paired by seed, with
    its 95 % t interval (benchmarks/real_interventions.py)."""
    if not INTERVENTIONS.is_file():
        return "_No interventions recorded yet: `python benchmarks/real_interventions.py` runs them._\n"
    doc = json.loads(INTERVENTIONS.read_text())
    seeds = len((doc.get("grid") or {}).get("axes", {}).get("seed", [])) or "?"
    head = " | ".join(label for _, label in EFFECTS)
    rows = [f"| {doc['cell']} | seeds done | {head} |", "|---|---|" + "---|" * len(EFFECTS)]
    for arm, by_seed in [("none (the grid's runs)", doc["none"]), *doc["runs"].items()]:
        cols = [spread([v[k] for v in by_seed.values() if v.get(k) is not None]) for k, _ in EFFECTS]
        rows.append(f"| {arm} | {len(by_seed)} of {seeds} | " + " | ".join(cols) + " |")
    rows += ["", f"| arm − none, paired by seed | seeds paired | {head} |", "|---|---|" + "---|" * len(EFFECTS)]
    for arm, eff in doc["effects"].items():
        rows.append(f"| {arm} | {len(eff['seeds'])} | " + " | ".join(interval(eff.get(k)) for k, _ in EFFECTS) + " |")
    return ("\n".join(rows) + f"\n\nFrom {recorded(doc, INTERVENTIONS)}. Ranges are over seeds; "
            f"intervals are 95 % t over the paired seeds; {DETECTABLE}\n")


def _note(doc: dict) -> str:
    cells = doc.get("cells") or {}
    state = ", ".join(f"{n} {k}" for k, n in cells.items() if n)
    return (f"From {recorded(doc, RESULT, '; runs: ' + (state or 'none'))}. Ranges are over seeds; "
            f"{DETECTABLE}")


def recorded(doc: dict, path: Path, more: str = "") -> str:
    """`benchmarks/results/<file>` (recorded <date> at commit <sha><more>), and which runs it kept
    from an earlier record of the grid (its directory gone) with where those were recorded."""
    prov = provenance_of(doc)
    return (f"`benchmarks/results/{path.name}` (recorded {str(prov.get('date', '?'))[:10]} at commit "
            f"{str(prov.get('commit', '?'))[:7]}{more}{kept_note(doc)}{code_note(doc)})")
