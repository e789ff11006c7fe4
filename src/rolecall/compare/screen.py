"""`rolecall compare screen SCREEN.yaml`: find a task where the roles have room to matter.

A workflow can beat the single-agent control through its roles only where they can change the
answer: where the voters disagree and one is right, or where first drafts are often wrong. The
screen evaluates the *untrained* workflows on candidate tasks and reports, per candidate:

- the question space: distinct questions in `draws` items (a candidate that cannot give its
  validation questions and leave room for training is excluded);
- single-sample accuracy (the generator's first answer: voting's first candidate, eval_opt's
  first draft), the voters' majority and oracle (some voter right), the workflow's own answer;
- the aggregator against its trivial rules (first, majority) and the headroom: oracle minus the
  best trivial rule;
- the evaluator's agreement with the verifier against always accepting (its verdicts carry no
  confidence, so no AUROC).

The selection rule is in the screen file and is copied into the record, with the commit that
last changed the file, before anything is evaluated:

    rule: {accuracy: [0.15, 0.60], min_distinct: 1000, draws: 5000}

keeps the candidates whose question space holds at least `min_distinct` questions in `draws`
items and whose single-sample accuracy lies in the window, then chooses the largest headroom
(ties: the earlier candidate in the file).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rolecall.compare.plan import CompareError
from rolecall.fsio import write_atomic

RULE_KEYS = {"accuracy", "min_distinct", "draws"}
# Problems per evaluation chunk: a whole screen's validation set at once where it is one answer each
# (an eval_opt round is a wave of one call per problem, and small waves leave the CPU idle between ops).
SCREEN_CHUNK = 200


@dataclass
class Screen:
    path: Path
    workflows: list[str]
    overrides: list[str]
    samples: int
    rule: dict
    candidates: dict[str, dict[str, Any]]  # label -> dotted overrides


def load_screen(path: str | Path) -> Screen:
    from rolecall.shipped_configs import existing_or_shipped

    path = existing_or_shipped(path, "screen", CompareError)
    where = f"screen file {str(path)!r}"
    try:
        raw = yaml.safe_load(path.read_text("utf-8"))
    except yaml.YAMLError as e:
        raise CompareError(f"{where}: not valid YAML: {' '.join(str(e).split())}") from None
    if not isinstance(raw, dict) or set(raw) - {"workflows", "overrides", "samples", "rule", "candidates"}:
        raise CompareError(f"{where}: a mapping with workflows, overrides, samples, rule and candidates")
    rule = raw.get("rule") or {}
    acc = rule.get("accuracy")
    if set(rule) != RULE_KEYS or not (isinstance(acc, list) and len(acc) == 2 and 0 <= acc[0] < acc[1] <= 1):
        raise CompareError(f"{where}: rule needs accuracy: [low, high] (0 <= low < high <= 1), min_distinct and draws")
    cands = raw.get("candidates")
    if not isinstance(cands, dict) or not cands or not all(isinstance(v, dict) for v in cands.values()):
        raise CompareError(f"{where}: candidates must map a label to its dotted config overrides")
    here = path.parent
    wfs = [str(p if Path(p).is_absolute() or not (here / p).exists() else here / p) for p in raw.get("workflows") or []]
    if not wfs:
        raise CompareError(f"{where}: name the workflows to screen (multi-agent configs)")
    return Screen(path, wfs, [f"{k}={json.dumps(v)}" for k, v in (raw.get("overrides") or {}).items()],
                  int(raw.get("samples", 1)), rule, cands)


def commit_of(path: Path) -> dict:
    """The commit that last changed the screen file, and when (None outside a git checkout)."""
    from rolecall.rundir.sitting import git

    line = git(path.resolve().parent, "log", "-1", "--format=%H %cI", "--", path.name)
    dirty = git(path.resolve().parent, "status", "--porcelain", "--", path.name)
    sha, _, date = (line or "").partition(" ")
    return {"commit": sha or None, "date": date or None, "uncommitted_changes": bool(dirty)}


def _mean(xs: list) -> float | None:
    xs = [float(x) for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def summarize(doc: dict) -> dict:
    """What the screen reads off one untrained evaluation."""
    rows = list(doc["problems"].values())
    out = {"accuracy": doc.get("accuracy"), "oracle": _mean([x for r in rows for x in r.get("oracle", [])])}
    rules: dict[str, dict[str, float | None]] = {}
    for r in rows:
        for role, by in (r.get("rules") or {}).items():
            for rule, xs in by.items():
                rules.setdefault(role, {}).setdefault(rule, []).extend(xs)  # type: ignore[arg-type]
    out["rules"] = {role: {rule: _mean(xs) for rule, xs in by.items()} for role, by in rules.items()}
    firsts = [v for by in out["rules"].values() for k, v in by.items() if k in ("first", "always accept")]
    out["single_sample"] = firsts[0] if firsts else None
    best = max((v for by in out["rules"].values() for v in by.values() if v is not None), default=None)
    if out["oracle"] is not None and best is not None:
        out["headroom"] = out["oracle"] - best
        out["role_minus_best_rule"] = None if out["accuracy"] is None else out["accuracy"] - best
    m = doc.get("metrics") or {}
    for key in ("eval_opt/evaluator_accuracy", "eval_opt/rule_always_correct_acc"):
        if key in m:
            out[key.split("/")[1]] = m[key]
    if "evaluator_accuracy" in out:
        out["auroc"] = None  # binary verdicts: no confidence to rank by
    return out


def choose(rule: dict, rows: dict[str, dict]) -> dict:
    """The rule applied to the screened candidates: which pass, which is chosen and why the others not."""
    low, high = rule["accuracy"]
    passing, why = [], {}
    for label, row in rows.items():
        if row.get("excluded"):
            why[label] = row["excluded"]
            continue
        if row["space"]["distinct"] < rule["min_distinct"]:
            why[label] = f"{row['space']['distinct']} distinct questions in {row['space']['draws']} draws < {rule['min_distinct']}"
            continue
        acc = row.get("single_sample")
        if acc is None or not low <= acc <= high:
            why[label] = f"single-sample accuracy {acc} outside [{low}, {high}]"
            continue
        if row.get("headroom") is None:
            why[label] = "no headroom measured (no workflow with an oracle)"
            continue
        passing.append(label)
    chosen = max(passing, key=lambda k: rows[k]["headroom"], default=None)  # max keeps the first of equals
    return {"passing": passing, "excluded": why, "chosen": chosen}


def _provenance(cfg, out: Path) -> dict:
    """rolecall's code, the libraries, this machine, the base model's hash, and which code and machine
    answered each evaluation."""
    from rolecall.compare.evaluate import read_eval
    from rolecall.rundir.fingerprint import model_fingerprint
    from rolecall.rundir.sitting import code_version, library_versions, machine

    model = {k: v for k, v in model_fingerprint(cfg).items() if k != "path"}
    evals = {p.stem: {k: (read_eval(p) or {}).get(k) for k in ("code", "machine")}
             for p in sorted((out / "evals").glob("*.json"))}
    return {"code": code_version(), "versions": library_versions(), "machine": machine(), "model": model,
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "evaluations": evals}


def run_screen(screen: Screen, out: Path, resume: bool, notify, listener=None) -> dict:
    """Screen every candidate (resumably: finished evaluations are kept) and write `<out>/screen.json`."""
    from rolecall.compare.evaluate import evaluate_arm, read_eval
    from rolecall.compare.plan import eval_config, load_checked
    from rolecall.tasks.reasoning_gym import question_space

    out = Path(out)
    record_path = out / "screen.json"
    if record_path.is_file() and not resume:
        raise CompareError(f"{out} already holds a screen; pass --resume to continue it or choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    record = {"what": "rolecall compare screen", "screen_file": str(screen.path), "rule": screen.rule,
              "rule_file": commit_of(screen.path), "rule_written": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "workflows": screen.workflows, "overrides": screen.overrides, "samples": screen.samples,
              "candidates": {}, "choice": None}
    if record_path.is_file():  # keep when the rule was first written down
        old = json.loads(record_path.read_text("utf-8"))
        record.update({k: old[k] for k in ("rule_written", "rule_file") if k in old})
    configs = {}
    for label, sets in screen.candidates.items():  # a typo in the file fails now, before any evaluation
        extra = [f"{k}={json.dumps(v)}" for k, v in sets.items()]
        try:
            configs[label] = [load_checked(w, [*screen.overrides, *extra]) for w in screen.workflows]
        except CompareError as e:
            raise CompareError(f"screen candidate {label!r}: {e}") from None
    write_atomic(record_path, json.dumps(record, indent=1) + "\n")
    for label, sets in screen.candidates.items():
        row: dict[str, Any] = {"overrides": sets}
        try:
            cfgs = configs[label]
            t = cfgs[0].task
            row["space"] = question_space(t.gym, dict(t.gym_options), screen.rule["draws"]) if t.name == "reasoning_gym" \
                else {"draws": None, "distinct": t.n_val, "saturated": None}
            for cfg in cfgs:
                path = out / "evals" / f"{label}-{cfg.workflow.name}.json"
                path.parent.mkdir(parents=True, exist_ok=True)
                doc = read_eval(path)
                if doc is None:
                    notify(f"screening {label}: {cfg.workflow.name} untrained on {t.n_val} problems")
                    doc = evaluate_arm(eval_config(cfg), path, {"name": path.stem, "arm": "untrained", "candidate": label},
                                       samples=screen.samples, chunk_problems=SCREEN_CHUNK, base=True)
                row[cfg.workflow.name] = summarize(doc)
            first = [row[c.workflow.name].get("single_sample") for c in cfgs]
            row["single_sample"] = _mean(first)
            row["headroom"] = max((row[c.workflow.name].get("headroom") for c in cfgs
                                   if row[c.workflow.name].get("headroom") is not None), default=None)
        except (ValueError, OSError) as e:  # e.g. too few distinct questions to give validation and training
            row["excluded"] = " ".join(str(e).split())
        record["candidates"][label] = row
        write_atomic(record_path, json.dumps(record, indent=1) + "\n")
    record["choice"] = choose(screen.rule, record["candidates"])
    record["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    record["provenance"] = _provenance(next(iter(configs.values()))[0], out)
    write_atomic(record_path, json.dumps(record, indent=1) + "\n")
    return record
