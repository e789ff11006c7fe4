"""Learning on the real tier: SmolLM2-135M-Instruct, each shipped `configs/real/` config, on 2 cores.

    rolecall get-model smollm2-135m                               # once
    python benchmarks/real_learning.py --base-only                # step-0 accuracy of every config
    python benchmarks/real_learning.py --only voting-ip           # one config, 60 minutes
    python benchmarks/real_learning.py                            # every config, 60 minutes each
    python benchmarks/real_learning.py --details RUN_DIR...       # metrics of finished runs, read again

Each run is the real CLI, `rolecall train configs/real/smollm2-<name>.yaml` with
`train.max_minutes` at the budget, read back from its metrics.jsonl: the step-0 validation
accuracy (the base model: fresh LoRA adapters change nothing), the best validation accuracy,
its step and minutes, and for each role whose output the workflow parses (the aggregator's
pick, the evaluator's or verifier's verdict) the fraction of validation episodes at that step
in which it parsed, and the workflow's own validation metrics there (`val_metrics`). Every
entry is appended to benchmarks/results/real_learning.json with its provenance (commit, model
hash, versions, machine, command); nothing earlier is overwritten, and the table printed at the
end shows the newest entry per config.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.children import run_child  # noqa: E402  (after the path fix above)
from benchmarks.provenance import append_result, latest, provenance  # noqa: E402

HERE = Path(__file__).resolve().parent
CONFIGS = HERE.parent / "configs" / "real"
RESULT = HERE / "results" / "real_learning.json"
NAMES = ["single", "voting-ip", "voting-sp", "eval_opt-ip", "eval_opt-sp", "orch_workers-ip", "orch_workers-sp",
         "chain", "debate"]


def config_path(name: str) -> Path:
    return CONFIGS / f"smollm2-{name}.yaml"


def role_format(row: dict) -> dict:
    """{role: share of validation episodes (or calls) whose output parsed}, from the workflows'
    `<role>_parsed` metrics (logged under `role_format: plain`)."""
    return {k.rsplit("/", 1)[-1].removesuffix("_parsed"): v for k, v in row.items()
            if k.startswith("val/") and k.endswith("_parsed") and v is not None}


def val_metrics(row: dict) -> dict:
    """A validation row's run-level metrics (accuracy, reward, the workflow's own: selection
    accuracy, verdict accuracy, pass@k ...), without the per-role and per-policy detail."""
    return {k.removeprefix("val/"): v for k, v in row.items()
            if k.startswith("val/") and not k.startswith(("val/role/", "val/policy/"))}


def metric_rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def val_curve(rows: list[dict]) -> list[dict]:
    """Every validation of a run: its step, minutes and `val_metrics`."""
    return [{"step": r["step"], "minutes": round(r["time/elapsed_s"] / 60, 1), **val_metrics(r)}
            for r in rows if "val/accuracy" in r]


def train_curve(rows: list[dict]) -> list[dict]:
    """Every training step's reward, role formats and each role's truncated share and length."""
    keep = ("reward/mean", "_parsed", "/truncated_frac", "/completion_len")
    return [{"step": r["step"], **{k: v for k, v in r.items() if k.endswith(keep)}}
            for r in rows if "reward/mean" in r and "val/accuracy" not in r]


def read_run(run_dir: Path, rows: list[dict] | None = None) -> dict:
    rows = metric_rows(run_dir) if rows is None else rows
    vals = [r for r in rows if "val/accuracy" in r]
    base = next(r for r in vals if r["step"] == 0)
    trained = [r for r in vals if r["step"] > 0] or [base]
    best = max(trained, key=lambda r: (r["val/accuracy"], -r["step"]))  # ties: the earliest
    stop = next((r for r in reversed(rows) if r.get("event") == "stop"), None)
    return {"base": base["val/accuracy"], "best": best["val/accuracy"], "best_step": best["step"],
            "minutes_to_best": round(best["time/elapsed_s"] / 60, 1), "role_format": role_format(best),
            "role_format_base": role_format(base),
            "val_metrics": {"base": val_metrics(base), "best": val_metrics(best)},
            "curve": [[r["step"], r["val/accuracy"], round(r["time/elapsed_s"] / 60, 1)] for r in vals],
            "stopped": stop and stop.get("reason")}


def describe(name: str) -> dict:
    import rolecall

    cfg = rolecall.make_config(str(config_path(name)))
    return {"config": f"configs/real/smollm2-{name}.yaml", "workflow": cfg.workflow.name,
            "routing": None if cfg.workflow.name in ("single",) else cfg.routing,
            "task": f"reasoning_gym:{cfg.task.gym} {json.dumps(cfg.task.gym_options, sort_keys=True)}",
            "val_problems": cfg.task.n_val, "workflow_options": dict(cfg.workflow.options)}


def learn(name: str, budget_min: float, keep: Path, overrides: list[str]) -> dict:
    out = keep / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    cmd = [sys.executable, "-m", "rolecall", "train", str(config_path(name)), "--out", str(out), *overrides,
           f"train.max_minutes={budget_min}"]
    t0 = time.time()
    run_child(cmd, env={**os.environ, "HF_HUB_OFFLINE": "1"}, cwd=HERE.parent)
    return {**read_run(out), "budget_min": budget_min, "wall_min": round((time.time() - t0) / 60, 1),
            "run_dir": str(out)}


def base_only(name: str) -> dict:
    """The step-0 validation of the config, alone: the base model's accuracy and role formats."""
    import rolecall

    m = rolecall.evaluate(rolecall.make_config(str(config_path(name))), base=True)
    return {"base": m["val/accuracy"], "role_format_base": role_format(m), "base_only": True}


def table(entries: list[dict]) -> str:
    lines = ["| config | base | best | step | minutes | role formats at best |", "|---|---|---|---|---|---|"]
    for e in entries:
        formats = ", ".join(f"{k} {v:.2f}" for k, v in (e.get("role_format") or e.get("role_format_base") or {}).items())
        lines.append(f"| {e['config']} | {e['base']:.3f} | {e.get('best', float('nan')):.3f} | {e.get('best_step', '')} "
                     f"| {e.get('minutes_to_best', '')} | {formats} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(NAMES), help="Comma-separated config names (default: all).")
    ap.add_argument("--budget-min", type=float, default=60.0, help="Wall-clock budget of each run, minutes.")
    ap.add_argument("--base-only", action="store_true", help="Only the base model's accuracy of each config.")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="A config override for every run (recorded with the entry), e.g. "
                         "workflow.options.format_penalty=0.5.")
    ap.add_argument("--keep", type=Path, default=None, help="Where the run directories go (default: a temp dir).")
    ap.add_argument("--details", type=Path, nargs="+", metavar="RUN_DIR",
                    help="Read finished runs of this script (their run_dir) and append their workflow metrics at "
                         "every validation, and each training step's reward, role formats and truncation, to the "
                         "file's `details` list; trains nothing.")
    args = ap.parse_args()
    if args.details:
        missing = [str(d) for d in args.details if not (d / "metrics.jsonl").is_file()]
        if missing:
            sys.exit(f"--details: no metrics.jsonl in {', '.join(missing)} (a run directory of this script)")
        for run_dir in args.details:
            rows = metric_rows(run_dir)
            entry = {"run_dir": str(run_dir), "config": describe(run_dir.name.rsplit("-", 2)[0])["config"],
                     **{k: v for k, v in read_run(run_dir, rows).items() if k != "curve"},
                     "val_metrics_curve": val_curve(rows), "train_curve": train_curve(rows),
                     **provenance(None, matmul=False)}
            append_result(RESULT, "details", entry)
            print(json.dumps({k: entry[k] for k in ("config", "best_step", "val_metrics")}))
        return
    from rolecall.policies.real_models import real_model_dir

    keep = args.keep or Path(tempfile.mkdtemp(prefix="rolecall-real-"))
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = sorted(set(names) - set(NAMES))
    if unknown:
        sys.exit(f"--only: unknown {unknown}; known: {NAMES}")
    for name in names:
        prov = provenance(real_model_dir("smollm2-135m"))  # before the run: the code it starts from
        measured = base_only(name) if args.base_only else learn(name, args.budget_min, keep, args.overrides)
        prov["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        entry = {**describe(name), "overrides": args.overrides, "base_model": "smollm2-135m", **measured, **prov}
        entry["model_sha256"] = prov["model_sha256"]
        append_result(RESULT, "runs", entry)
        print(json.dumps({k: v for k, v in entry.items() if k not in ("curve", "versions", "machine")}), flush=True)
    runs = json.loads(RESULT.read_text())["runs"]
    print(table(latest([r for r in runs if bool(r.get("base_only")) == args.base_only], "config", "overrides")))


if __name__ == "__main__":
    main()
