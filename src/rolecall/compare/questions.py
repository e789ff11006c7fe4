"""The questions a comparison answers, each from the evaluations of its arms:

(a) the trained workflow against the trained single-agent control, at equal problems (the
    control trained on the same problems), equal generated tokens and equal training time (the
    long control's checkpoint at the workflow's total);
(b) the workflow's structure: the generator transfer (the control's adapter inside the
    workflow) against the control itself, and the trained workflow against the transfer (what
    training under the workflow added beyond placing the single agent in it);
(c) training: the trained workflow against its untrained self;
(d) each selecting or judging role against its trivial rules, on the same episodes (the trained
    workflow's, and the untrained one's).

Each answer is `stats.answer` over a seed x problem table of differences (A - B).
"""
from __future__ import annotations

from rolecall.compare.stats import Table, answer, cell_stats, make_table

Outcomes = dict[str, list]  # uid -> one entry per answer (1, 0 or None)


def _scored(xs: list) -> list[float]:
    return [float(x) for x in xs if x is not None]


def outcomes(doc: dict) -> Outcomes:
    return {uid: row["correct"] for uid, row in doc["problems"].items()}


Paired = tuple[Table | None, dict[str, float]]  # the table, and each side's mean accuracy over its cells


def _means(cells: dict[str, dict[str, tuple[float, float]]], sides: dict[str, dict[str, tuple[float, float]]],
           table: Table) -> dict[str, float]:
    """Each side's mean over the cells the table kept (the seeds and problems both arms have)."""
    keep = [(s, p) for s in table.seeds for p in table.problems]
    return {k: round(sum(v[s][p][0] for s, p in keep) / len(keep), 4) for k, v in sides.items()}


def arm_table(a: dict[int, Outcomes], b: dict[int | None, Outcomes]) -> Paired:
    """A - B per seed and problem; `b` keyed by None is one evaluation paired with every seed of `a`
    (the untrained workflow). (None, {}) when no seed has both arms."""
    cells: dict[str, dict[str, tuple[float, float]]] = {}
    sides: dict[str, dict[str, dict[str, tuple[float, float]]]] = {"A": {}, "B": {}}
    for seed, rows in a.items():
        other = b.get(seed, b.get(None))
        if other is None:
            continue
        for uid, xs in rows.items():
            xa, xb = _scored(xs), _scored(other.get(uid, []))
            if xa and xb:
                cells.setdefault(f"seed{seed}", {})[uid] = cell_stats(xa, xb)
                sides["A"].setdefault(f"seed{seed}", {})[uid] = cell_stats(xa)
                sides["B"].setdefault(f"seed{seed}", {})[uid] = cell_stats(xb)
    if not cells:
        return None, {}
    table = make_table(cells)
    return table, _means(cells, sides, table)


def rule_table(docs: dict[int | None, dict], role: str, rule: str) -> Paired:
    """The role's outcome minus its rule's, episode by episode, per seed and problem."""
    cells: dict[str, dict[str, tuple[float, float]]] = {}
    sides: dict[str, dict[str, dict[str, tuple[float, float]]]] = {"A": {}, "B": {}}
    for seed, doc in docs.items():
        key = "once" if seed is None else f"seed{seed}"
        for uid, row in doc["problems"].items():
            ruled = (row.get("rules") or {}).get(role, {}).get(rule)
            if ruled is None:
                continue
            both = [(float(o), float(r)) for o, r in zip(row["correct"], ruled) if o is not None and r is not None]
            if both:
                cells.setdefault(key, {})[uid] = cell_stats([o - r for o, r in both])
                sides["A"].setdefault(key, {})[uid] = cell_stats([o for o, _ in both])
                sides["B"].setdefault(key, {})[uid] = cell_stats([r for _, r in both])
    if not cells:
        return None, {}
    table = make_table(cells)
    return table, _means(cells, sides, table)


def _question(qid: str, kind: str, text: str, a: str, b: str, paired: Paired, **extra) -> dict:
    table, means = paired
    out = {"id": qid, "kind": kind, "question": text, "A": a, "B": b, **extra}
    if table is None:
        return {**out, "verdict": "not run", "why": "no seed has both arms evaluated"}
    return {**out, "A_accuracy": means["A"], "B_accuracy": means["B"], **answer(table).as_dict()}


def ask(evals: dict[str, dict], plan: dict) -> list[dict]:
    """Every question of the comparison `plan` describes (its workflows, routings, seeds and the
    long control's matched evaluations), answered from `evals` (name -> evaluation)."""
    seeds = plan["seeds"]
    per_seed = lambda name: {s: outcomes(evals[f"{name}-seed{s}"]) for s in seeds  # noqa: E731
                             if f"{name}-seed{s}" in evals}
    control = per_seed("control")
    out: list[dict] = []
    for wf in plan["workflows"]:
        label, routings, shared = wf["label"], wf["routings"], wf.get("structure") or wf["label"]
        untrained = evals.get(f"{shared}-untrained")
        transfer = per_seed(f"{shared}-transfer")
        if transfer and shared == label:
            out.append(_question(f"b/transfer/{label}", "b", f"{label} with the control's adapter on its answering "
                                 "roles (the generator transfer) against the control alone", f"{label}-transfer",
                                 "control", arm_table(transfer, control)))
        for routing in routings:
            arm = f"{label}-{routing}"
            trained = per_seed(arm)
            out.append(_question(f"a/problems/{arm}", "a", f"{arm} trained against the single-agent control, at equal "
                                 "problems", arm, "control", arm_table(trained, control), matching="problems"))
            for matching in ("generated_tokens", "wall_seconds"):
                longer = {s: outcomes(evals[name]) for s in seeds
                          if (name := (plan["matched"].get(f"{arm}-seed{s}") or {}).get(matching)) in evals}
                out.append(_question(f"a/{matching}/{arm}", "a", f"{arm} trained against the single-agent control, at "
                                     f"equal {matching.replace('_', ' ')}", arm, "long control",
                                     arm_table(trained, longer), matching=matching))
            if transfer:
                out.append(_question(f"b/trained_vs_transfer/{arm}", "b", f"{arm} trained against {label} with the "
                                     "control's adapter (what training under the workflow added)", arm,
                                     f"{shared}-transfer", arm_table(trained, transfer)))
            if untrained is not None:
                out.append(_question(f"c/{arm}", "c", f"{arm} trained against the untrained workflow", arm,
                                     f"{shared}-untrained", arm_table(trained, {None: outcomes(untrained)})))
            out += _role_questions(arm, {s: evals[f"{arm}-seed{s}"] for s in seeds if f"{arm}-seed{s}" in evals})
        if untrained is not None and shared == label:
            out += _role_questions(f"{label}-untrained", {None: untrained})
    return out + _variants(plan, per_seed)


def _variants(plan: dict, per_seed) -> list[dict]:
    """(e) Two configs of one workflow (outcome against counterfactual credit, say), trained under the
    same routing on the same seeds: A - B."""
    wfs, out = plan["workflows"], []
    for i, a in enumerate(wfs):
        for b in wfs[i + 1:]:
            if not a.get("family") or a.get("family") != b.get("family"):
                continue
            for routing in [r for r in a["routings"] if r in b["routings"]]:
                x, y = f"{a['label']}-{routing}", f"{b['label']}-{routing}"
                out.append(_question(f"e/{x}/{y}", "e", f"{x} against {y}: two ways of training one workflow, "
                                     "same seeds", x, y, arm_table(per_seed(x), per_seed(y))))
    return out


def _role_questions(arm: str, docs: dict[int | None, dict]) -> list[dict]:
    pairs = sorted({(role, rule) for doc in docs.values() for row in doc["problems"].values()
                    for role, rules in (row.get("rules") or {}).items() for rule in rules})
    return [_question(f"d/{arm}/{role}/{rule}", "d", f"{arm}: the {role} against the rule '{rule}' on the same "
                      "episodes", f"{role}", f"rule: {rule}", rule_table(docs, role, rule), role=role, rule=rule)
            for role, rule in pairs]


def arm_accuracy(evals: dict[str, dict]) -> dict[str, dict]:
    """Per evaluation: its accuracy over every scorable answer, and its workflow metrics."""
    return {name: {"accuracy": doc.get("accuracy"), "seed": doc.get("seed"), "arm": doc.get("arm"),
                   "checkpoint_step": doc.get("checkpoint_step"), "cost": doc.get("cost"),
                   "metrics": doc.get("metrics", {})} for name, doc in sorted(evals.items())}


def headline(questions: list[dict]) -> list[dict]:
    """The questions `--target-mde` waits on: (a), (b), (c) and (e), those that were run."""
    return [q for q in questions if q["kind"] in ("a", "b", "c", "e") and "mde80" in q]
