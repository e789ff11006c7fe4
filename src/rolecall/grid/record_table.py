"""A grid's record as markdown tables (`rolecall grid table RECORD`): what the README and the docs
show of every recorded grid, rendered from the record alone.

- **Arms**: per arm (a method, or the single-agent control), the seeds done and, for each asked
  metric (a validation metric: `accuracy`, or any `val/<name>` the workflow logs), its mean at
  step 0 and at the last validation with the 95 % t interval over seeds; accuracy's peak, its
  deepest fall below an earlier peak, how many seeds fell by their cliff margin and the training
  time (validation excluded); with `curve`, the mean accuracy at every validation.
- **Paired**: each asked pair of arms, A − B paired by seed, for each metric at the last
  validation, and the first metric's gain over each run's own step 0: the mean, its 95 % t
  interval, the smallest difference the seeds could detect with 80 % power, and what the interval
  allows one to say ("cannot tell" when it spans zero).
- **Against the control**: where the grid had a single-agent control, each method minus it at
  equal problems, equal generated tokens and equal training time (`rolecall.grid.matching`).

A note under the tables names the record's command, date, commit and base weights, and the runs
kept from earlier records.
"""
from __future__ import annotations

import json
import math
import statistics
import textwrap
from pathlib import Path

from rolecall.tdist import mde_factor, verdict_of
from rolecall.grid import matching
from rolecall.grid.tables import CLIFF_MARGIN  # a run's margin where its record does not give it
from rolecall.rundir.sitting import describe

CONTROL = "control"  # the arm name of the grid's single-agent control
MATCHED = {"problems": "equal problems", "generated_tokens": "equal generated tokens",
           "wall_seconds": "equal training time"}
NOTE_WIDTH = 95  # the docs' prose width, so a rendered note reads like the text around it


# kind -> the arm's last label (a run of a method has its method's labels alone)
KIND_LABELS = {"run": None, CONTROL: CONTROL, "long_control": "long_control", "base": "base"}


def arms(doc: dict) -> dict[str, dict[str, dict]]:
    """Every finished run, keyed by its arm (its setting and method labels joined by `-`; the
    single-agent control is `control`, a longer one `long_control`, the untrained base model's
    evaluation `base`, each after its setting's labels) and then by its seed label."""
    named = [a["name"] for a in doc.get("axes") or [] if a.get("role") != "seed"]
    seed_axes = [a["name"] for a in doc.get("axes") or [] if a.get("role") == "seed"]
    out: dict[str, dict[str, dict]] = {}
    for r in doc["runs"]:
        if r["status"] != "done" or r["kind"] not in KIND_LABELS:
            continue
        kind = KIND_LABELS[r["kind"]]
        labels = [r["labels"][a] for a in named if r["labels"].get(a)] + ([kind] if kind else [])
        out.setdefault("-".join(labels) or "run", {})["-".join(r["labels"].get(a, "") for a in seed_axes) or "-"] = r
    return out


def validations(run: dict) -> list[dict]:
    """The run's validations. A record written before they were kept has accuracy on its curve and
    the workflow's metrics at the last validation alone."""
    if "validations" in run:
        return run["validations"]
    vals = [{"step": 0 if c.get("problems") == 0 else None, "accuracy": c["accuracy"]} for c in run["curve"]]
    if vals:
        vals[-1].update(run.get("rules_at_last_validation") or {})
    return vals


def deepest_fall(run: dict) -> float:
    """The deepest fall of validation accuracy below an earlier peak (a cliff when it reaches the
    run's `alarms.cliff_margin`): the record's own where it has one."""
    if isinstance(run.get("fall"), (int, float)):
        return run["fall"]
    peak, fall = -math.inf, 0.0
    for p in run["curve"]:
        peak = max(peak, p["accuracy"])
        fall = max(fall, peak - p["accuracy"])
    return fall


def value(run: dict, metric: str, at: str) -> float | None:
    """`metric` of one run at step 0 (`base`), its last validation (`last`) or its best (`peak`);
    `fall` is accuracy's deepest fall below an earlier peak. None where the run never logged it."""
    if at == "fall":
        return deepest_fall(run)
    vals = validations(run)
    got = [v[metric] for v in vals if isinstance(v.get(metric), (int, float))]
    if at == "base":
        return vals[0].get(metric) if vals and vals[0].get("step") == 0 else None
    if not got:
        return None
    return got[-1] if at == "last" else max(got)


def _values(runs: dict[str, dict], metric: str, at: str) -> list[float]:
    return [v for v in (value(r, metric, at) for r in runs.values()) if v is not None and math.isfinite(v)]


def mean_ci(values: list[float]) -> str:
    """`0.950 [0.930, 0.970]`: the mean and its 95 % t interval (the mean alone from one value)."""
    if not values:
        return "–"
    p = matching.Paired(values)
    return f"{p.mean:.3f}" + (f" [{p.ci95[0]:.3f}, {p.ci95[1]:.3f}]" if p.ci95 else "")


def detectable(values: list[float]) -> float | None:
    """The smallest paired difference these seeds could detect with 80 % power (None from one seed)."""
    if len(values) < 2:
        return None
    return mde_factor(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))


def difference(values: list[float]) -> str:
    """`+0.02 [-0.02, +0.06], detectable ≥ 0.05, cannot tell`: a paired difference as every table shows it."""
    if not values:
        return "–"
    p = matching.Paired(values)
    if p.ci95 is None:
        return f"{p.mean:+.2f} (one seed, no interval)"
    verdict = {"A > B": "first ahead", "B > A": "second ahead"}.get(verdict_of(p.ci95), "cannot tell")
    return f"{p.mean:+.2f} [{p.ci95[0]:+.2f}, {p.ci95[1]:+.2f}], detectable ≥ {detectable(values):.2f}, {verdict}"


def _row(cells: list) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _cliffs(runs: dict[str, dict]) -> int:
    return sum(deepest_fall(r) >= (r.get("cliff_margin") or CLIFF_MARGIN) - 1e-12 for r in runs.values())


def _accuracy_cells(runs: dict[str, dict]) -> list:
    """Peak, deepest fall, seeds with a cliff and training minutes: what a trained arm's accuracy did."""
    if all(r["kind"] == "base" for r in runs.values()):  # the base model is evaluated, not trained
        return ["–"] * 4
    minutes = [r["curve"][-1]["wall_seconds"] / 60 for r in runs.values()
               if r["curve"] and isinstance(r["curve"][-1].get("wall_seconds"), (int, float))]
    return [mean_ci(_values(runs, "accuracy", "peak")), mean_ci(_values(runs, "accuracy", "fall")), _cliffs(runs),
            f"{statistics.fmean(minutes):.1f}" if minutes else "–"]


def arms_table(doc: dict, metrics: tuple[str, ...] = ("accuracy",), curve: bool = False) -> str:
    """Per arm, each metric from step 0 to the last validation; where accuracy is asked, its peak,
    deepest fall, cliffs and training time too. An arm that logged none of the metrics is left out
    (the control of a grid read for a selecting role's metrics)."""
    found = arms(doc)
    steps = sorted({v["step"] for runs in found.values() for r in runs.values() for v in validations(r)
                    if v["step"] is not None})
    with_accuracy = "accuracy" in metrics
    head = ["arm", "seeds", *(f"{m}: step 0 → last, mean [95 % CI]" for m in metrics),
            *(("peak accuracy, mean [95 % CI]", "deepest fall below an earlier peak, mean [95 % CI]",
               "seeds with a cliff", "training minutes, mean") if with_accuracy else ()),
            *((f"step {s}" for s in steps) if curve else ())]
    rows = [_row(head), "|---" * len(head) + "|"]
    for arm, runs in found.items():
        trained = not all(r["kind"] == "base" for r in runs.values())
        cells, logged = [arm, len(runs)], False
        for m in metrics:
            base, last = _values(runs, m, "base"), _values(runs, m, "last") if trained else []
            logged = logged or bool(base or last)
            cells.append((f"{statistics.fmean(base):.3f} → " if base else "– → ") + (mean_ci(last) if trained else "–"))
        if not logged:
            continue
        cells += _accuracy_cells(runs) if with_accuracy else []
        for s in steps if curve else ():
            accs = [v["accuracy"] for r in runs.values() for v in validations(r) if v["step"] == s]
            cells.append(f"{statistics.fmean(accs):.3f}" if accs else "–")
        rows.append(_row(cells))
    return "\n".join(rows) + "\n"


def paired_values(doc: dict, a: str, b: str, metric: str, at: str = "last") -> list[float]:
    """A − B on `metric` per seed both finished; `at="gain"` is each run's last minus its own step 0."""
    found = arms(doc)
    if a not in found or b not in found:
        raise ValueError(f"no finished arm named {(a if a not in found else b)!r} in the record; its arms: "
                         f"{', '.join(found) or 'none'}")

    def one(run: dict) -> float | None:
        if at != "gain":
            return value(run, metric, at)
        last, base = value(run, metric, "last"), value(run, metric, "base")
        return None if last is None or base is None else last - base

    out = []
    for seed in sorted(set(found[a]) & set(found[b])):
        x, y = one(found[a][seed]), one(found[b][seed])
        if x is not None and y is not None:
            out.append(x - y)
    return out


def _points(run: dict) -> list[tuple[dict[str, float], float]]:
    """The run's recorded curve as `rolecall.grid.matching` reads one: (cumulative costs, accuracy)."""
    return [({k: v for k, v in p.items() if k != "accuracy"}, p["accuracy"]) for p in run["curve"]]


def matched_values(doc: dict, a: str, b: str, cost: str) -> list[float]:
    """A − B in accuracy per seed, each read at its last validation within the cheaper run's total
    `cost` (problems, generated tokens or training seconds); none where a curve lacks that cost."""
    found = arms(doc)
    out = []
    for seed in sorted(set(found.get(a, {})) & set(found.get(b, {}))):
        x, y = _points(found[a][seed]), _points(found[b][seed])
        if x and y and cost in x[-1][0] and cost in y[-1][0]:
            d = matching.pair_difference(x, y, cost)
            if d is not None:
                out.append(d)
    return out


def paired_table(doc: dict, pairs: list[tuple[str, str]], metrics: tuple[str, ...] = ("accuracy",)) -> str:
    head = ["A − B, paired by seed", "seeds", *(f"{m} at the last validation" for m in metrics),
            *(f"accuracy at {MATCHED[c]}" for c in matching.MATCHINGS), "deepest fall",
            f"{metrics[0]} gained over its own step 0"]
    rows = [_row(head), "|---" * len(head) + "|"]
    for a, b in pairs:
        diffs = [paired_values(doc, a, b, m) for m in metrics]
        rows.append(_row([f"{a} − {b}", len(diffs[0]), *map(difference, diffs),
                          *(difference(matched_values(doc, a, b, c)) for c in matching.MATCHINGS),
                          difference(paired_values(doc, a, b, "accuracy", "fall")),
                          difference(paired_values(doc, a, b, metrics[0], "gain"))]))
    return "\n".join(rows) + "\n"


def control_table(doc: dict) -> str:
    """Each method minus the control of the same seed at the three matched costs, from the record's
    `against_control` (what `rolecall grid` computed when it recorded the grid); ‡ marks a column
    read against the longer control (`--long-controls`)."""
    head = ["method − control", "seeds paired", *(MATCHED[m] for m in matching.MATCHINGS),
            "peak over its own step 0"]
    rows, long = [_row(head), "|---" * len(head) + "|"], False
    for c in (c for c in doc.get("against_control") or [] if c["paired_with_control"]):
        name = "-".join([*c["setting"], *c["method"]]) or "run"
        longer = (c.get("long_control") or {}).get("matchings") or ()
        long = long or bool(longer)
        rows.append(_row([name, c["paired_with_control"],
                          *(difference(c[m]["values"]) + (" ‡" if m in longer else "") for m in matching.MATCHINGS),
                          difference(c["peak_vs_own_base"]["values"])]))
    if len(rows) == 2:
        return ""
    foot = ["", "‡: against the longer control of the same seed (the record's `long_control` runs), trained past "
                "the cell's tokens and time; the other columns against the grid's own control."] if long else []
    return "\n".join(rows + foot) + "\n"


def _runs(doc: dict) -> list[dict]:
    runs = doc.get("runs")
    return runs if isinstance(runs, list) else []  # other records (runs by arm) name no cells


def code_note(doc: dict) -> str:
    """"; code: <cell> at <sha>, <cell> at <sha>, <sha> from step 31, ..." for the finished runs
    whose directories stored which code wrote them (each start or resume: their `sittings`), then
    those that did not ("every run at <sha>" when one code wrote them all). A record's own commit
    is its last writer's; the runs of a grid can span commits. Unfinished runs are left out (no
    table shows their numbers), and so is the base model's evaluation (it trains nothing)."""
    said, unknown = {}, []
    for run in _runs(doc):
        if run.get("status") in ("pending", "started") or run.get("kind") == "base":
            continue
        name = run.get("cell") or f"seed {run.get('seed', '?')}"
        if code := describe(run.get("sittings") or []):
            said[name] = code
        else:
            unknown.append(name)
    if not said:
        return ""
    codes = set(said.values())
    text = (f"; code: every run at {codes.pop()}" if len(codes) == 1 and not unknown
            else "; code: " + ", ".join(f"{name} at {code}" for name, code in said.items()))
    return text + (f"; no commit stored for {', '.join(unknown)}" if unknown else "")


def kept_note(doc: dict) -> str:
    """"; kept from the record of <date> at commit <sha> (transformers <v>): <cells>" for each earlier
    record that runs were kept from (their directories gone); each run names where it was first recorded."""
    origins: dict[str, list[str]] = {}
    for run in _runs(doc):
        if was := run.get("kept_from"):
            where = (f"{str(was.get('date', '?'))[:10]} at commit {str(was.get('commit', '?'))[:7]} "
                     f"(transformers {(was.get('versions') or {}).get('transformers', '?')})")
            origins.setdefault(where, []).append(run.get("cell") or f"seed {run.get('seed', '?')}")
    return "".join(f"; kept from the record of {where}: {', '.join(names)}" for where, names in origins.items())


def note(doc: dict, file: str) -> str:
    """Where the numbers come from: the record's file, date, command, commit and base weights, which
    code wrote each run, and the runs it kept from earlier records."""
    prov = doc.get("provenance") or {}
    commit = (prov.get("code") or {}).get("commit") or prov.get("commit")
    weights = (prov.get("model") or {}).get("weights")
    text = (f"Recorded {str(prov.get('date', '?'))[:10]} in `{file}` by `{prov.get('command')}`"
            f"{f', commit {commit[:7]}' if commit else ''}{f', base weights `{weights}`' if weights else ''}"
            f"{kept_note(doc)}{code_note(doc)}. "
            + (f"The control's runs are from `{doc['control_from_file']}`. " if doc.get("control_from_file") else "")
            + "Intervals are 95 % t over seeds; \"detectable ≥\" is the smallest paired difference the seeds could "
            "detect with 80 % power.")
    return textwrap.fill(text, NOTE_WIDTH, break_long_words=False, break_on_hyphens=False)


def with_control_from(doc: dict, other: dict, file: str) -> dict:
    """`doc` with its control runs replaced by those of `other` (recorded in `file`): a grid on the
    same task, problems and seeds whose single-agent control this grid did not run again."""
    runs = [r for r in doc["runs"] if r["kind"] != CONTROL] + [r for r in other["runs"] if r["kind"] == CONTROL]
    if not any(r["kind"] == CONTROL for r in other["runs"]):
        raise ValueError(f"{file}: this record has no control runs to read")
    return {**doc, "runs": runs, "control_from_file": file}


def read(path: str | Path) -> dict:
    """A grid's record from its file, or a ValueError that names what is wrong with it."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a readable record ({e})") from None
    if not (isinstance(doc, dict) and isinstance(doc.get("runs"), list) and isinstance(doc.get("axes"), list)):
        raise ValueError(f"{path}: not a grid's record (written by `rolecall grid --record`)")
    return doc


def parse_pair(text: str) -> tuple[str, str]:
    a, sep, b = text.partition(":")
    if not (sep and a and b):
        raise ValueError(f"--pair {text!r}: write two arms as A:B")
    return a, b


PARTS = ("arms", "pairs", "control")


def markdown(doc: dict, file: str, *, metrics: tuple[str, ...] = ("accuracy",), pairs: list[tuple[str, str]] = (),
             curve: bool = False, parts: tuple[str, ...] = PARTS) -> str:
    """The record's tables (`parts` of: arms; the asked pairs; against the control where there was
    one) and its note."""
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise ValueError(f"no table named {', '.join(sorted(unknown))}; the tables are {', '.join(PARTS)}")
    logged = {k for runs in arms(doc).values() for r in runs.values() for v in validations(r) for k in v} - {"step"}
    if missing := [m for m in metrics if m not in logged]:
        raise ValueError(f"no run of the record logged {', '.join(map(repr, missing))}; its validation metrics: "
                         f"{', '.join(sorted(logged)) or 'none'}")
    out = [arms_table(doc, metrics, curve)] if "arms" in parts else []
    if pairs and "pairs" in parts:
        out.append(paired_table(doc, list(pairs), metrics))
    if "control" in parts and (control := control_table(doc)):
        out.append(control)
    out.append(note(doc, file) + "\n")
    return "\n".join(out)
