"""Fake grid runs shared by the grid tests (sequential, Ray, report): a runner that writes the
run directory a real cell would (config, metric rows, sittings, summary) from fixed validation
curves, so nothing trains. A module of its own so that Ray's worker processes import it by name."""
from __future__ import annotations

import json
from pathlib import Path

from rolecall.config import dump_config
from rolecall.diagnostics.summary import write_summary
from rolecall.grid.runner import CellJob
from rolecall.rundir import sitting


def grid_file(tmp_path: Path, text: str, name: str = "g.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


SMALL = """
overrides: {train.steps: 20, train.val_every: 10}
axes:
  workflow: [voting]
  routing: [shared, isolated]
  seed: [0, 1]
"""



def val(step: int, acc: float) -> dict:
    return {"step": step, "val/accuracy": acc}


def train_rows(steps: int = 20, roles=("generator", "aggregator"), policies=("generator", "aggregator")) -> list[dict]:
    """χ² 0.01 (0 for the second role: on-policy), perplexity 1.2, grad norm 0.5, entropy 0.9 at every
    step, except step 15 (χ² 0.08, perplexity 1.8, grad norm 1.0) and step 18 (entropy 0.6)."""
    rows = []
    for s in range(1, steps + 1):
        row: dict = {"step": s, "reward/mean": 0.5}
        for i, name in [(i, f"role/{r}") for i, r in enumerate(roles)] + [(0, f"policy/{p}") for p in policies]:
            row.update({f"{name}/chi2_token": (0.08 if s == 15 else 0.01) if i == 0 else 0.0,
                        f"{name}/training_ppl": 1.8 if s == 15 else 1.2, f"{name}/grad_norm": 1.0 if s == 15 else 0.5,
                        f"{name}/entropy": 0.6 if s == 18 else 0.9})
        rows.append(row)
    return rows


def write_run(path: Path, cfg, rows: list[dict]) -> None:
    """A run directory as the trainer leaves it: config.yaml, metrics.jsonl, sittings.jsonl, summary.json."""
    path.mkdir(parents=True, exist_ok=True)
    sitting.record(path, 0)
    (path / "config.yaml").write_text(dump_config(cfg))
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in sorted(rows, key=lambda r: r["step"])))
    write_summary(path)


# validation accuracy per cell at steps 0, 10, 20, ... (base: step 0 only), and alarm events.
# voting-shared-seed1 falls 0.16 from its peak and recovers: peak minus final (0.02) misses that cliff.
ACC = {"base": [0.30], "control-seed0": [0.30, 0.55, 0.50], "control-seed1": [0.30, 0.60, 0.65],
       "voting-isolated-seed0": [0.40, 0.80, 0.60], "voting-isolated-seed1": [0.40, 0.70, 0.75],
       "voting-shared-seed0": [0.40, 0.60, 0.62], "voting-shared-seed1": [0.40, 0.66, 0.50, 0.64]}
ALARMS = {"voting-isolated-seed0": [
    {"step": 15, "event": "alarm", "alarm": "gradient_amplification", "role": "generator", "message": "m"},
    {"step": 20, "event": "alarm", "alarm": "validation_cliff", "role": None, "message": "m"}]}


class FakeRunner:
    """Writes each cell's run directory from ACC; raises for the cells in `fail`."""

    def __init__(self, fail=()):
        self.fail, self.calls = set(fail), []

    def __call__(self, job: CellJob, on_event) -> None:
        self.calls.append(job.cell.name)
        if job.cell.name in self.fail:
            raise RuntimeError("the verifier fell over\nwith a second line")
        accs = ACC[job.cell.name]
        rows = [val(10 * i, a) for i, a in enumerate(accs)] + ALARMS.get(job.cell.name, [])
        if job.cell.kind != "base":
            single = job.config.workflow.name == "single"
            roles = ("generator",) if single else ("generator", "aggregator")
            pols = {"isolated": roles, "shared": ("shared",)}[job.config.routing]
            rows += train_rows(roles=roles, policies=pols)
        for r in rows:
            on_event("val" if "val/accuracy" in r else "alarm" if "event" in r else "step", r)
        write_run(job.path, job.config, rows)

