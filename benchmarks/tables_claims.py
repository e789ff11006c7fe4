"""The seed papers' claims at CPU scale, each a grid config run by `rolecall grid --record`
(configs/grids/claims_debate.yaml, claims_chain.yaml): per arm over seeds with 95 % t intervals,
and two arms paired by seed with the smallest difference the design detects. Rendered into the
README by `python -m benchmarks.tables`."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

from benchmarks.tables_grid import interval
from rolecall.grid.record import method_difference, method_stats, methods

RESULTS = Path(__file__).resolve().parent / "results"


def _load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def _note(text: str) -> str:  # wrapped as the README's prose (benchmarks/tables.py)
    return textwrap.fill(text, 95, break_long_words=False, break_on_hyphens=False)


def claims_debate() -> str:
    """claims_debate.json (configs/grids/claims_debate.yaml): every debater co-trained vs one trained
    against frozen peers, the mean validation curve over seeds, the final with its 95 % t interval,
    and the two arms paired by seed."""
    doc = _load("claims_debate.json")
    labels = {"co_trained": "co-trained (3 adapters)", "frozen_peers": "one trained, peers frozen"}
    runs = methods(doc)
    steps = sorted({v["step"] for arm in runs.values() for r in arm.values() for v in r["validations"]})
    rows = ["| arm | seeds | " + " | ".join(f"step {s}" for s in steps) + " | final, mean [95 % CI] |",
            "|---" * (len(steps) + 3) + "|"]
    for st in sorted(method_stats(doc), key=lambda st: list(labels).index(st["method"][0])):
        arm = runs[tuple(st["method"])]
        means = []
        for step in steps:
            accs = [v["accuracy"] for r in arm.values() for v in r["validations"] if v["step"] == step]
            means.append(f"{sum(accs) / len(accs):.3f}" if accs else "—")
        rows.append(f"| {labels[st['method'][0]]} | {len(st['seeds'])} | " + " | ".join(means)
                    + f" | {_mean_ci(st['final'])} |")
    diff = method_difference(doc, ("co_trained",), ("frozen_peers",))
    rows += ["", _note(f"Co-trained minus one trained beside frozen peers, final accuracy paired by seed "
                       f"({diff['n']} seeds): {_difference(diff)}. " + _record_note(doc, "claims_debate.json"))]
    return "\n".join(rows) + "\n"


def _mean_ci(stat: dict) -> str:
    """`0.950 [0.930, 0.970]`: a mean and its 95 % t interval over seeds (the mean alone from one seed)."""
    lo_hi = f" [{stat['ci95'][0]:.3f}, {stat['ci95'][1]:.3f}]" if stat.get("ci95") else ""
    return f"{stat['mean']:.3f}{lo_hi}"


def _difference(diff: dict) -> str:
    """A paired difference as the grid tables show it (mean, 95 % t interval, the 80 %-power
    detectable effect), and what the interval allows one to say."""
    ci = diff.get("ci95")
    verdict = "" if not ci else ", cannot tell" if ci[0] <= 0 <= ci[1] else ", first ahead" if ci[0] > 0 else \
        ", second ahead"
    return interval(diff) + verdict


def _record_note(doc: dict, file: str) -> str:
    """Where a grid record's numbers come from: its command, commit, date and base weights."""
    prov = doc["provenance"]
    commit = (prov.get("code") or {}).get("commit")
    weights = (prov.get("model") or {}).get("weights")
    return (f"Recorded {prov['date'][:10]} in `benchmarks/results/{file}` by `{prov['command']}`"
            f"{f', commit {commit[:7]}' if commit else ''}{f', base weights `{weights}`' if weights else ''}.")


def claims_chain() -> str:
    """claims_chain.json (configs/grids/claims_chain.yaml): agent-wise vs pooled normalisation on
    the chain, each arm over seeds with 95 % t intervals, and the two per-role arms paired by seed."""
    doc = _load("claims_chain.json")
    labels = {"outcome-agentwise": ("outcome", "agent-wise (= slot-grouped GRPO)"),
              "per_role-agentwise": ("per role", "agent-wise"), "per_role-pooled": ("per role", "pooled")}
    rows = ["| credit | normalisation | seeds | step 0, mean | final, mean [95 % CI] "
            "| largest drop between validations, mean [95 % CI] |", "|---|---|---|---|---|---|"]
    for s in sorted(method_stats(doc), key=lambda s: list(labels).index(s["method"][0])):
        credit, norm = labels[s["method"][0]]
        rows.append(f"| {credit} | {norm} | {len(s['seeds'])} | {s['base']['mean']:.3f} | {_mean_ci(s['final'])} "
                    f"| {_mean_ci(s['largest_drop'])} |")
    pair = [(m,) for m in ("per_role-agentwise", "per_role-pooled")]
    final, drop = (method_difference(doc, *pair, stat) for stat in ("final", "largest_drop"))
    steps = next(iter(method_stats(doc)), None)
    rows += ["", _note(f"Per-role credit, agent-wise minus pooled, paired by seed ({final['n']} seeds): final "
                       f"{_difference(final)}; largest drop {_difference(drop)}. "
                       + _record_note(doc, "claims_chain.json"))] if steps else []
    return "\n".join(rows) + "\n"
