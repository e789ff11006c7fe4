"""A claim of the multi-agent RL papers, checked at CPU scale on the embedded model.

`debate` — "MAPoRL: Multi-Agent Post-Co-Training for Collaborative Large Language Models
   with Reinforcement Learning": co-training every debater beats training one debater
   against frozen peers. Same debate (3 agents x 3 rounds, each agent its own role), same
   steps; the only switch is routing:
     co-trained:    routing=isolated                                   (agent0..2 each a LoRA, all trained)
     frozen peers:  routing={agent0: learner, agent1: base, agent2: base}   (only agent0 trains)

The chain's claim ("Dr. MAS", agent-wise against pooled normalisation) is a grid config now:
`rolecall grid configs/grids/claims_chain.yaml --record benchmarks/results/claims_chain.json`.

    python benchmarks/seed_claims.py debate --steps 15

Writes benchmarks/results/seed_claims.json (arms merged by name) and prints markdown tables.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.provenance import write_result  # noqa: E402
from benchmarks.learning import HERE, run  # noqa: E402

RESULTS = HERE / "results" / "seed_claims.json"
DEBATE = "workflow.options={n_agents: 3, rounds: 3, gamma: 0.3, agents: roles}"
FROZEN = "{agent0: learner, agent1: base, agent2: base}"


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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("claim", choices=["debate"])
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--runs-dir", type=Path, default=Path("/tmp/rolecall-bench"))
    a = ap.parse_args()
    debate(a.steps or 20, a.runs_dir)


if __name__ == "__main__":
    main()
