"""The grid's matched comparisons: each cell against the control of its seed at equal problems,
equal generated tokens and equal wall time, with a 95 % t interval over seeds. Numbers by hand."""
from __future__ import annotations

from pathlib import Path

import pytest

from rolecall.diagnostics.summary import summarize
from rolecall.grid import matching, render
from rolecall.grid.tables import GridData, RunData

AXES = [{"name": "workflow", "role": "method", "keys": ["workflow.name"]},
        {"name": "seed", "role": "seed", "keys": ["train.seed"]}]


def rows(per_step: tuple[float, float, float], vals: dict[int, float], steps: int = 4) -> list[dict]:
    """`steps` step rows of (problems, generated tokens, step seconds), and validation rows."""
    p, t, w = per_step
    out = [{"step": s, "rollout/problems": p, "tokens/generated": t, "time/step_s": w} for s in range(1, steps + 1)]
    return out + [{"step": s, "val/accuracy": a} for s, a in vals.items()]


def run(name: str, kind: str, seed: int, rows_: list[dict]) -> RunData:
    labels = {"seed": str(seed)} | ({"workflow": "voting"} if kind == "run" else {})
    r = RunData(name, kind, labels, "done", summary=summarize(rows_), routing="isolated" if kind == "run" else "")
    r.rows = rows_
    return r


def grid() -> GridData:
    """Control: 4 problems, 100 tokens, 10 s a step; validation 0.2 / 0.5 / 0.6 at steps 0 / 2 / 4.
    Voting: 4 problems, 400 tokens, 20 s a step; 0.3 / 0.55 / 0.70 + seed/100. Seed 1's voting
    run was resumed: its step 2 is logged twice, and only the last row counts."""
    runs = []
    for seed in range(3):
        runs.append(run(f"control-seed{seed}", "control", seed, rows((4, 100, 10), {0: 0.2, 2: 0.5, 4: 0.6})))
        voting = rows((4, 400, 20), {0: 0.3, 2: 0.55, 4: 0.70 + seed / 100})
        if seed == 1:
            voting.insert(1, {"step": 2, "rollout/problems": 4, "tokens/generated": 9999, "time/step_s": 999})
        runs.append(run(f"voting-seed{seed}", "run", seed, voting))
    return GridData(Path("grid"), AXES, runs)


def test_the_three_matchings_and_the_own_base_by_hand():
    (row,) = matching.comparisons(grid())
    assert row["paired"] == 3
    # equal problems (16 each): final against final, 0.70 + s/100 - 0.60
    assert row["problems"].values == pytest.approx((0.10, 0.11, 0.12))
    lo, hi = row["problems"].ci95
    half = 4.303 * 0.01 / 3 ** 0.5  # t(2) x sd 0.01 / sqrt(3)
    assert (lo, hi) == (pytest.approx(0.11 - half), pytest.approx(0.11 + half))
    # equal generated tokens: the control's 400 in all; voting had shown only its step 0 by then
    assert row["generated_tokens"].values == pytest.approx((-0.3, -0.3, -0.3))
    # equal wall time: the control's 40 s; voting's step 2 (at 40 s) shows 0.55
    assert row["wall_seconds"].values == pytest.approx((-0.05, -0.05, -0.05))
    assert row["peak_vs_own_base"].values == pytest.approx((0.40, 0.41, 0.42))


def test_one_seed_has_no_interval_and_the_report_says_so():
    g = grid()
    g.runs = [r for r in g.runs if r.labels["seed"] == "0"]
    (row,) = matching.comparisons(g)
    assert row["problems"].n == 1 and row["problems"].ci95 is None
    head, body = render.matched_rows(g)
    assert body[0][head.index("vs control: equal problems")] == "+10.0 (1 seed, no interval)"
    three = render.matched_rows(grid())[1][0]
    assert three[head.index("equal wall time")] == "-5.0 [-5.0, -5.0] (3 seeds)"


def test_t_quantiles():
    assert matching.t_quantile(2) == 4.303 and matching.t_quantile(12) == 2.228 and matching.t_quantile(100) == 1.96


def test_curves_over_seeds_against_each_cost_and_their_charts():
    curves = {r["kind"]: r for r in matching.mean_curves(grid())}
    xs, mean, lo, hi = curves["run"]["by"]["generated_tokens"]
    assert xs == [0, 800, 1600] and mean == pytest.approx([0.3, 0.55, 0.71]) and (lo[-1], hi[-1]) == (0.70, 0.72)
    assert curves["control"]["by"]["wall_seconds"][0] == [0, 20, 40] and curves["control"]["seeds"] == 3
    page = render.curve_figures(grid())
    for label in ("problems trained on", "tokens generated (every role)", "training seconds"):
        assert f"validation accuracy by {label}" in page
    assert page.count('class="band"') == 6  # two cells x three costs, each shaded over its seeds
