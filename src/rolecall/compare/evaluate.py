"""Evaluate one arm: every validation problem answered `samples` times, written problem by problem.

An evaluation is a JSON file (`<dir>/evals/<name>.json`):

    {"name", "arm", "seed", "workflow", "samples", "checkpoint_step", "cost" (what the run had spent
     by that checkpoint), "accuracy", "episodes", "metrics" (the workflow's own, e.g. the
     evaluator's agreement with the verifier), "problems": {uid: {"correct": [1, 0, ...],
     "rules": {role: {rule: [...]}}, "oracle": [...]}}}

`correct` holds one entry per answer: 1 when the verifier gave the final answer the full reward,
0 when not, null when it could not score it. `rules` holds what each selecting or judging role's
trivial rules would have reached on the same episode (`Workflow.rule_outcomes`), `oracle` what a
perfect selector would have (`Workflow.oracle_outcome`). Problems are answered in chunks; each
finished chunk is appended to `<name>.partial.jsonl`, so a stopped evaluation resumes at the first
unfinished chunk. Every model call is seeded by itself (`rollout.request_seeds`), so the answers do
not depend on how the chunks were batched.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Callable

from rolecall.fsio import write_atomic
from rolecall.schema import Config
from rolecall.types import Episode


def _correct(value: float | None) -> float | None:
    return None if value is None else float(value == 1.0)


def episode_rows(workflow, episodes: list[Episode]) -> dict[str, dict]:
    """{uid: {"correct", "rules", "oracle"}} of one chunk's scored episodes, in episode order."""
    out: dict[str, dict] = {}
    for ep in episodes:
        row = out.setdefault(ep.problem.uid, {"correct": [], "rules": {}, "oracle": []})
        row["correct"].append(_correct(ep.reward))
        for role, rules in workflow.rule_outcomes(ep).items():
            for rule, value in rules.items():
                row["rules"].setdefault(role, {}).setdefault(rule, []).append(_correct(value))
        row["oracle"].append(_correct(workflow.oracle_outcome(ep)))
    for row in out.values():
        if not any(v is not None for v in row["oracle"]):
            del row["oracle"]
        if not row["rules"]:
            del row["rules"]
    return out


def arm_seed(name: str) -> int:
    """The sampling seed of an evaluation, from its name: arms do not share their draws by accident."""
    return int.from_bytes(hashlib.sha256(f"rolecall compare {name}".encode()).digest()[:4], "big")


def finished_chunks(path: Path, size: int) -> dict[int, dict]:
    """The chunks an earlier attempt finished; none when it cut the problems into chunks of another size."""
    done: dict[int, dict] = {}
    if not path.is_file():
        return done
    for line in path.read_text("utf-8").splitlines():
        try:
            doc = json.loads(line)
            done[int(doc["chunk"])] = doc
        except (ValueError, KeyError, TypeError):
            break  # a torn last line from a kill: that chunk is done again
    if any(doc.get("size") != size for doc in done.values()):  # cut otherwise, or by a version that did not say
        path.unlink()
        return {}
    return done


def _append(path: Path, doc: dict) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(doc) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def evaluate_arm(cfg: Config, out: Path, meta: dict, *, samples: int, chunk_problems: int,
                 checkpoint: Path | None = None, base: bool = False,
                 progress: Callable[[int, int], None] = lambda done, total: None) -> dict:
    """Answer every validation problem of `cfg` `samples` times (adapters of `checkpoint`, or none
    with `base`), write `out` and return what it holds (`meta` is copied into it)."""
    from rolecall.policies.routing import BASE_POLICY
    from rolecall.rundir.checkpoint import load_adapters
    from rolecall.train.stack import build_stack
    from rolecall.train.step import play

    partial = out.with_name(out.stem + ".partial.jsonl")
    done = finished_chunks(partial, chunk_problems)
    stack = build_stack(cfg)
    try:
        problems = stack.val_P
        chunks = [problems[i:i + chunk_problems] for i in range(0, len(problems), chunk_problems)]
        if checkpoint is not None:
            load_adapters(checkpoint, stack.models_by_adapter(), stack.routing.adapters)
        routes = {r: BASE_POLICY for r in stack.routing.routes} if base else stack.routing.routes
        seed = arm_seed(out.stem)
        for i, chunk in enumerate(chunks):
            progress(sum(len(c) for c in chunks[:i]), len(problems))
            if i in done:
                continue
            episodes, _ = play(stack, chunk, samples, routes, seed=seed)
            doc = {"chunk": i, "size": chunk_problems, "episodes": len(episodes),
                   "problems": episode_rows(stack.workflow, episodes),
                   "metrics": {k: v for k, v in stack.workflow.metrics(episodes).items()
                               if isinstance(v, (int, float)) and v == v}}
            _append(partial, doc)
            done[i] = doc
        progress(len(problems), len(problems))
    finally:
        stack.close()
    from rolecall.rundir.sitting import code_version, machine

    # Which code and which processor answered (an evaluation resumed elsewhere names the finishing one).
    result = {**meta, "samples": samples, "code": code_version(), "machine": machine(),
              **combine([done[i] for i in sorted(done)])}
    missing = len(problems) - len(result["problems"])
    if missing or result["episodes"] != len(problems) * samples:  # never write an evaluation with holes
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"evaluation {out.stem}: {missing} of {len(problems)} problems unanswered and "
                           f"{result['episodes']} answers for {len(problems) * samples}; its chunks were discarded, "
                           "run it again")
    write_atomic(out, json.dumps(result, indent=1) + "\n")
    partial.unlink(missing_ok=True)
    return result


def combine(chunks: list[dict]) -> dict:
    """The chunks as one evaluation: the problems, the accuracy over every scorable answer, and the
    workflow's metrics as the mean over chunks weighted by their episodes (each chunk's metric is
    over its own episodes, so this is the whole set's where a metric counts every episode once)."""
    problems = {uid: row for c in chunks for uid, row in c["problems"].items()}
    answers = [v for row in problems.values() for v in row["correct"] if v is not None]
    weights: dict[str, list[tuple[float, int]]] = {}
    for c in chunks:
        for k, v in c["metrics"].items():
            weights.setdefault(k, []).append((v, c["episodes"]))
    metrics = {k: sum(v * n for v, n in vs) / sum(n for _, n in vs) for k, vs in weights.items() if sum(n for _, n in vs)}
    return {"episodes": sum(c["episodes"] for c in chunks), "accuracy": sum(answers) / len(answers) if answers else None,
            "metrics": metrics, "problems": problems}


def read_eval(path: Path) -> dict | None:
    """A finished evaluation, or None (not run, or unreadable)."""
    try:
        return json.loads(Path(path).read_text("utf-8"))
    except (OSError, ValueError):
        return None
