"""Does the trained meta-policy deliberate better than its bootstrap and than fixed policies?

Runs `configs/examples/deliberation.yaml` through the real CLI once per seed (the seed of the
meta-policy's init, batches and sampled actions, and of the LLM's sampling) and reads each run's
`deliberation.json` (validation accuracy of always-PERSIST, always-REFINE, always-CONCEDE,
the supervised bootstrap, the SoftRankPO policy and the oracle) and its action-rate curve
(PERSIST/REFINE/CONCEDE per round while SoftRankPO trains) from metrics.jsonl.

    python benchmarks/deliberation.py                 # seeds 0 1 2
    python benchmarks/deliberation.py --seeds 0
    python benchmarks/deliberation.py --config configs/real/smollm2-deliberation.yaml
        # -> results/deliberation_smollm2-deliberation.json, docs/img/deliberation_smollm2-deliberation_actions.svg
    python benchmarks/deliberation.py --config configs/real/smollm2-deliberation.yaml --out runs/mpdf --resume
        # after a stop: seeds finished under --out are kept, one stopped midway continues, the rest run
    python benchmarks/deliberation.py --config configs/real/smollm2-deliberation.yaml --seeds 1 \
        --keep-from old.json   # a copy of the committed record: its other seeds are kept (their folders gone)

Beside the means, each arm is paired with the trained policy by seed: trained minus the arm,
its mean and 95 % t interval over the seeds.

The bar: on the mean over seeds, the trained policy beats the bootstrap, always-PERSIST and
always-REFINE on validation accuracy (exit 1 if not). Writes benchmarks/results/deliberation.json
and the action-rate curves, docs/img/deliberation_actions.svg.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from statistics import fmean

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.provenance import origin, write_result  # noqa: E402
from benchmarks.children import CONFIGS, HERE, clear_own, run_child  # noqa: E402

RESULT = HERE / "results" / "deliberation.json"
PLOT = HERE.parent / "docs" / "img" / "deliberation_actions.svg"
ACTIONS = ("persist", "refine", "concede")
SEED_RECORD = "benchmark_seed.json"  # one finished seed's record, kept in its run directory for --resume
COLORS = {"persist": "#1f77b4", "refine": "#ff7f0e", "concede": "#2ca02c"}


def rounds_in(curves: list[list[dict]]) -> list[int]:
    """The rounds an action curve recorded. Records written before 2026-12-05 hold three rounds'
    keys whatever the config ran, with None for a round not run: that round is not one."""
    return sorted({int(k[5]) for c in curves for p in c for k, v in p.items() if k.startswith("round") and v is not None})


def write_curves(runs: list[dict], path: Path) -> None:
    """One panel per round: the share of each action while SoftRankPO trains (mean over seeds)."""
    steps = [p["softrank_step"] for p in runs[0]["action_curve"]]
    rounds = rounds_in([r["action_curve"] for r in runs])
    pw, ph, left, top, gap = 260, 170, 44, 34, 26
    width, height = left + len(rounds) * (pw + gap), top + ph + 62
    xmax = max(steps) or 1
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
           f'height="{height}" font-family="sans-serif" font-size="11">', f'<rect width="{width}" height="{height}" fill="white"/>']
    for i, t in enumerate(rounds):
        x0 = left + i * (pw + gap)
        out.append(f'<text x="{x0 + pw / 2}" y="{top - 12}" text-anchor="middle" font-size="12">round {t + 1}</text>')
        out.append(f'<rect x="{x0}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>')
        for v in (0.0, 0.5, 1.0):
            y = top + ph * (1 - v)
            out.append(f'<line x1="{x0}" x2="{x0 + pw}" y1="{y}" y2="{y}" stroke="#eee"/>')
            if i == 0:
                out.append(f'<text x="{x0 - 6}" y="{y + 4}" text-anchor="end">{v:.1f}</text>')
        for v in (0, xmax // 2, xmax):
            x = x0 + pw * v / xmax
            out.append(f'<text x="{x}" y="{top + ph + 14}" text-anchor="middle">{v}</text>')
        for a in ACTIONS:
            pts = []
            for j, step in enumerate(steps):
                vals = [r["action_curve"][j][f"round{t}_{a}"] for r in runs if j < len(r["action_curve"])]
                vals = [v for v in vals if v is not None]
                if vals:
                    pts.append(f"{x0 + pw * step / xmax:.1f},{top + ph * (1 - fmean(vals)):.1f}")
            out.append(f'<polyline points="{" ".join(pts)}" fill="none" stroke="{COLORS[a]}" stroke-width="2"/>')
    out.append(f'<text x="{left + (width - left) / 2}" y="{top + ph + 32}" text-anchor="middle">SoftRankPO step '
               f'(validation deliberated by the policy, greedy; mean of {len(runs)} seeds)</text>')
    x = left
    for a in ACTIONS:
        out.append(f'<line x1="{x}" x2="{x + 20}" y1="{height - 12}" y2="{height - 12}" stroke="{COLORS[a]}" stroke-width="2.5"/>'
                   f'<text x="{x + 25}" y="{height - 8}">{a.upper()} rate</text>')
        x += 130
    out.append("</svg>")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(out) + "\n")


def run_seed(seed: int, out: Path, model: str | None, config: Path = CONFIGS / "deliberation.yaml",
             resume: bool = False) -> dict:
    """One seed's run into `out`; `resume` continues the run stopped there (its finished stages
    are kept: states, bootstrap, corpus, SoftRankPO's last checkpoint)."""
    if resume:
        cmd = [sys.executable, "-m", "rolecall", "train", "--resume", str(out)]
    else:
        cmd = [sys.executable, "-m", "rolecall", "train", str(config),
               f"metapolicy.seed={seed}", f"train.seed={seed}", "--out", str(out)]
        cmd += [f"model.path={model}"] if model else []
    t0 = time.time()
    run_child(cmd, env={**os.environ, "HF_HUB_OFFLINE": "1"}, cwd=HERE.parent)
    report = json.loads((out / "deliberation.json").read_text())
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    prefix = f"policy/{report['policy']}/val/"
    curve = [{"softrank_step": r["step"], "accuracy": r[prefix + "accuracy"],
              **{f"round{t}_{a}": r[f"{prefix}round{t}_{a}"] for t in range(3) for a in ACTIONS
                 if f"{prefix}round{t}_{a}" in r}}  # only the rounds the config ran
             for r in rows if r.get("stage") == "softrank_eval"]
    weights = json.loads((out / "fingerprint.json").read_text())["model"].get("weights")
    return {"seed": seed, "wall_s": round(time.time() - t0, 1), "resumed": resume, "base_weights": weights,
            "states": report["states"], "corpus": report["corpus"],
            "validation": report["validation"], "action_curve": curve}


def _keep(kept: Path, doc: dict) -> None:
    """A record for --resume in the run folder (no result: results go through write_result)."""
    kept.write_text(json.dumps(doc))


def _read_json(path: Path) -> dict:
    """A small record this benchmark wrote; one cut short (the machine died while writing it) is
    no record."""
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except ValueError:
        return {}


def run_seeds(seeds: list[int], root: Path, made_by: dict, resume: bool, run) -> list[dict]:
    """Each seed's record, from `run(seed, out, resumed)` into `root/seed<n>`; with `resume`, a
    seed this benchmark finished earlier with the same `made_by` (config and model) is read back
    instead, and one it started with the same `made_by` and did not finish is continued from its
    checkpoints, so a comparison over seeds can span sittings. Each finished seed is kept as soon
    as it ends."""
    runs = []
    for seed in seeds:
        out = root / f"seed{seed}"
        kept, started = out / SEED_RECORD, root / f"seed{seed}.started.json"
        earlier = _read_json(kept) if resume else {}
        if earlier.get("made_by") == made_by:
            runs.append(earlier["run"])
            print(f"seed {seed}: kept from {kept}", flush=True)
            continue
        midway = resume and (out / "rolecall-run.json").is_file() and _read_json(started).get("made_by") == made_by
        if midway:
            print(f"seed {seed}: continuing the run stopped in {out}", flush=True)
        else:
            clear_own(out, "rolecall-run.json")
            root.mkdir(parents=True, exist_ok=True)
            _keep(started, {"made_by": made_by})
        runs.append(run(seed, out, midway))
        _keep(kept, {"made_by": made_by, "run": runs[-1]})
        acc = {k: v["accuracy"] for k, v in runs[-1]["validation"].items()}
        print(f"seed {seed}: {json.dumps(acc)} in {runs[-1]['wall_s']}s", flush=True)
    return runs


def check_kept(earlier: dict, source: str, config: str, model_sha: str | None) -> None:
    """Refuse, before anything runs, to keep runs from a record of another config or other weights."""
    if earlier.get("config") != config:
        raise SystemExit(f"--keep-from {source}: it records {earlier.get('config')!r}, not {config!r}")
    theirs = (earlier.get("provenance") or {}).get("model_sha256")
    if theirs and model_sha and theirs != model_sha:
        raise SystemExit(f"--keep-from {source}: its runs used weights {theirs[:16]}…, these are {model_sha[:16]}…")


def keep_from(runs: list[dict], earlier: dict, source: str) -> list[dict]:
    """`runs` and every seed of `earlier` (a record of the same config, from `source`) that this
    sitting did not run, each kept one marked with where it was first recorded; in seed order."""
    done = {r["seed"] for r in runs}
    where = origin(earlier, source)
    kept = [{**r, "kept_from": r.get("kept_from") or where} for r in earlier["runs"] if r["seed"] not in done]
    return sorted(runs + kept, key=lambda r: r["seed"])


def paired_with_trained(runs: list[dict]) -> dict:
    """Per arm: trained minus the arm's validation accuracy by seed, the mean and 95 % t interval."""
    from rolecall.grid.matching import Paired

    out = {}
    for arm in runs[0]["validation"]:
        if arm == "trained":
            continue
        out[arm] = Paired.of([r["validation"]["trained"]["accuracy"] - r["validation"][arm]["accuracy"]
                              for r in runs]).as_dict()
    return out


def outputs(config: Path, result: Path | None, plot: Path | None) -> tuple[Path, Path]:
    """Where a run of `config` is recorded: the example config's files, or files named by the
    config's stem, so that another config never overwrites the example's record."""
    if config.resolve() == (CONFIGS / "deliberation.yaml").resolve():
        return result or RESULT, plot or PLOT
    stem = config.stem
    return result or RESULT.with_name(f"deliberation_{stem}.json"), plot or PLOT.with_name(f"deliberation_{stem}_actions.svg")


def summary(runs: list[dict], shown: str) -> dict:
    """The record: mean validation accuracy per arm over the seeds, each arm paired with the
    trained policy by seed, the bar and every seed's run."""
    arms = list(runs[0]["validation"])
    mean = {a: round(fmean(r["validation"][a]["accuracy"] for r in runs), 4) for a in arms}
    passed = all(mean["trained"] > mean[b] for b in ("sft", "persist", "refine"))
    return {"config": shown, "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "date": time.strftime("%Y-%m-%d"), "mean_accuracy": mean, "trained_minus": paired_with_trained(runs),
            "bar": "trained > sft, persist and refine (mean over seeds)", "passed": passed, "runs": runs}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--model", default=None, help="another base model directory (default: the config's)")
    ap.add_argument("--config", type=Path, default=CONFIGS / "deliberation.yaml")
    ap.add_argument("--result", type=Path, default=None,
                    help="default: results/deliberation.json for the example config, else results/deliberation_<config>.json")
    ap.add_argument("--plot", type=Path, default=None,
                    help="default: docs/img/deliberation_actions.svg for the example config, else "
                         "docs/img/deliberation_<config>_actions.svg")
    ap.add_argument("--out", type=Path, default=Path("/tmp/rolecall-bench-deliberation"))
    ap.add_argument("--resume", action="store_true",
                    help="keep each seed this benchmark finished earlier under --out (same --config and --model), "
                         "continue one it stopped midway, run the rest")
    ap.add_argument("--keep-from", type=Path, default=None,
                    help="an earlier record of this config whose run folders are gone: its seeds not in --seeds "
                         "are kept in the new record, each marked with where it was recorded")
    args = ap.parse_args()
    args.result, args.plot = outputs(args.config, args.result, args.plot)
    import yaml

    from benchmarks.provenance import weights_sha256
    from rolecall.policies.model import resolve_model_dir

    config = args.config.resolve()
    shown = str(config.relative_to(HERE.parent) if config.is_relative_to(HERE.parent) else config)
    model = args.model or ((yaml.safe_load(config.read_text()) or {}).get("model") or {}).get("path")
    model_dir = resolve_model_dir(model) if model else "embedded"
    earlier = json.loads(args.keep_from.read_text()) if args.keep_from else None  # before the result overwrites it
    if earlier is not None:
        check_kept(earlier, str(args.keep_from), shown, weights_sha256(model_dir) if model else None)
    runs = run_seeds(args.seeds, args.out, {"config": str(config), "model": args.model}, args.resume,
                     lambda seed, out, resumed: run_seed(seed, out, args.model, args.config, resumed))
    if earlier is not None:
        runs = keep_from(runs, earlier, str(args.keep_from))
    result = summary(runs, shown)
    args.result.parent.mkdir(parents=True, exist_ok=True)
    write_result(args.result, result, model_dir=model_dir)
    write_curves(runs, args.plot)
    print(f"mean validation accuracy over {len(runs)} seeds: {json.dumps(result['mean_accuracy'])}; "
          f"bar {'met' if result['passed'] else 'NOT met'}; wrote {args.result}")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
