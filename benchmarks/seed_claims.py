"""Two claims of the multi-agent RL papers, checked at CPU scale on the embedded model.

1. `debate` — "MAPoRL: Multi-Agent Post-Co-Training for Collaborative Large Language Models
   with Reinforcement Learning": co-training every debater beats training one debater
   against frozen peers. Same debate (3 agents x 3 rounds, each agent its own role), same
   steps; the only switch is routing:
     co-trained:    routing=isolated                                   (agent0..2 each a LoRA, all trained)
     frozen peers:  routing={agent0: learner, agent1: base, agent2: base}   (only agent0 trains)
2. `chain` — the claim of "Dr. MAS: Stable Reinforcement Learning for Multi-Agent LLM
   Systems": normalising advantages per agent (`agentwise`) trains the generator ->
   verifier -> refiner chain more stably than a normalisation that ignores who acted. Same
   budget, 3 seeds each; reported with the spread across seeds. In the chain each role is
   called once, so slot-grouped GRPO forms exactly the agent-wise groups (identical runs),
   and under the outcome broadcast pooling every role only rescales the advantages. The
   comparison that can differ is agent-wise vs pooled (`algo.group_by=episode`) with
   per-role credit (`workflow.options.credit=per_role`: each agent paid for its own job).

    python benchmarks/seed_claims.py debate --steps 15
    python benchmarks/seed_claims.py chain --steps 30 --arms agentwise,grpo                   # outcome credit
    python benchmarks/seed_claims.py chain --steps 30 --arms agentwise,pooled --credit per_role

Writes benchmarks/results/seed_claims.json (arms merged by name) and prints markdown tables.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from statistics import fmean, pstdev

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.provenance import write_result  # noqa: E402
from benchmarks.learning import HERE, run  # noqa: E402

RESULTS = HERE / "results" / "seed_claims.json"
DEBATE = "workflow.options={n_agents: 3, rounds: 3, gamma: 0.3, agents: roles}"
FROZEN = "{agent0: learner, agent1: base, agent2: base}"


def _largest_drop(curve: list[dict]) -> float:
    """The largest fall in validation accuracy between two consecutive validations."""
    accs = [v["accuracy"] for v in curve]
    return max([0.0, *(a - b for a, b in zip(accs, accs[1:]))])  # 0 when it never fell


def _save(section: str, arms: dict) -> dict:
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results.setdefault(section, {}).update(arms)
    write_result(RESULTS, results)
    return results[section]


def debate(steps: int, runs_dir: Path) -> None:
    for arm, routing in (("co-trained", "isolated"), ("frozen-peers", FROZEN)):
        out = runs_dir / f"debate-{arm}-{int(time.time())}"
        r = run("debate", routing, out, [DEBATE, f"train.steps={steps}", "train.val_every=5"])
        r["arm"] = arm
        r["final"] = r["val_curve"][-1]["accuracy"]
        r["gain_points"] = round(100 * (r["final"] - r["base_accuracy"]), 1)
        arms = _save("debate", {arm: r})
    print("| debate arm | routing | step 0 | best | final | gain (points) | wall time |")
    print("|---|---|---|---|---|---|---|")
    for arm, r in arms.items():
        best = max(v["accuracy"] for v in r["val_curve"])
        print(f"| {arm} | `{r['routing']}` | {r['base_accuracy']:.3f} | {best:.3f} | {r['final']:.3f} "
              f"| {r['gain_points']:+.1f} | {r['wall_s'] / 60:.1f} min |")


ARMS = {"agentwise": ["algo.estimator=agentwise"], "grpo": ["algo.estimator=grpo"],
        "pooled": ["algo.estimator=grpo", "algo.group_by=episode"]}


def chain(steps: int, seeds: list[int], runs_dir: Path, arm_names: list[str], credit: str) -> None:
    section = "chain" if credit == "outcome" else f"chain-{credit}"
    arms = {}
    for estimator in arm_names:
        runs = []
        for seed in seeds:
            out = runs_dir / f"{section}-{estimator}-s{seed}-{int(time.time())}"
            r = run("chain", "isolated", out, [*ARMS[estimator], f"workflow.options={{credit: {credit}}}",
                                               f"train.seed={seed}", f"train.steps={steps}", "train.val_every=5"])
            r.update(seed=seed, final=r["val_curve"][-1]["accuracy"], largest_drop=_largest_drop(r["val_curve"]))
            runs.append(r)
        finals = [r["final"] for r in runs]
        gains = [r["final"] - r["base_accuracy"] for r in runs]
        arms[estimator] = {
            "runs": runs, "seeds": seeds, "steps": steps,
            "final_mean": round(fmean(finals), 4), "final_sd": round(pstdev(finals), 4),
            "final_range": [min(finals), max(finals)],
            "gain_points_mean": round(100 * fmean(gains), 1), "gain_points_sd": round(100 * pstdev(gains), 1),
            "largest_drop_mean": round(fmean(r["largest_drop"] for r in runs), 4),
            "wall_s_mean": round(fmean(r["wall_s"] for r in runs), 1)}
        arms = {**_save(section, {estimator: arms[estimator]})}
    print(f"credit: {credit}")
    print("| chain estimator | seeds | step 0 | final, mean ± sd (range) | gain, points | largest drop between validations, mean | wall time / run |")
    print("|---|---|---|---|---|---|---|")
    for est, a in arms.items():
        base = fmean(r["base_accuracy"] for r in a["runs"])
        print(f"| {est} | {len(a['runs'])} | {base:.3f} | {a['final_mean']:.3f} ± {a['final_sd']:.3f} "
              f"({a['final_range'][0]:.3f}–{a['final_range'][1]:.3f}) | {a['gain_points_mean']:+.1f} ± {a['gain_points_sd']:.1f} "
              f"| {a['largest_drop_mean']:.3f} | {a['wall_s_mean'] / 60:.1f} min |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("claim", choices=["debate", "chain"])
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--arms", default="agentwise,pooled", help=f"chain arms, of {sorted(ARMS)}")
    ap.add_argument("--credit", default="per_role", choices=["outcome", "per_role"])
    ap.add_argument("--runs-dir", type=Path, default=Path("/tmp/rolecall-bench"))
    a = ap.parse_args()
    if a.claim == "debate":
        debate(a.steps or 20, a.runs_dir)
    else:
        chain(a.steps or 30, [int(s) for s in a.seeds.split(",")], a.runs_dir, a.arms.split(","), a.credit)


if __name__ == "__main__":
    main()
