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
    assert three[head.index("equal wall time")] == "-5.0 [-5.0, -5.0] (3 seeds), the cell read at 50 % of its run"


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


def test_a_pair_names_how_far_into_the_cell_it_read():
    (row,) = matching.comparisons(grid())
    # the control's whole run: 16 problems, 400 tokens, 40 s; voting's: 16, 1600, 80
    assert row["reach"]["problems"].values == (1.0, 1.0, 1.0)
    assert row["reach"]["generated_tokens"].values == (0.25, 0.25, 0.25)
    assert row["reach"]["wall_seconds"].values == (0.5, 0.5, 0.5)
    head, (body,) = render.matched_rows(grid())
    assert body[head.index("vs control: equal problems")] == "+11.0 [+8.5, +13.5] (3 seeds)"
    assert body[head.index("equal generated tokens")].endswith(", the cell read at 25 % of its run")


def long_controls(methods: tuple[str, ...] = ("single",)) -> GridData:
    """A control grid of its own: 16 steps of 4 problems, 100 tokens, 10 s; 0.2 / 0.5 / 0.7 at
    steps 0 / 8 / 16, trained as the grid's one method cell (no control of its own)."""
    runs = []
    for seed in range(3):
        for method in methods:
            r = run(f"{method}-seed{seed}", "run", seed, rows((4, 100, 10), {0: 0.2, 8: 0.5, 16: 0.7}, steps=16))
            r.labels = {"seed": str(seed), "workflow": method}
            runs.append(r)
    return GridData(Path("long"), AXES, runs)


def test_a_longer_control_grid_answers_equal_tokens_and_time_and_keeps_equal_problems():
    (row,) = matching.comparisons(grid(), long_controls())
    assert row["paired_with_longer"] == 3
    assert row["problems"].values == pytest.approx((0.10, 0.11, 0.12))  # the grid's own control
    # tokens: both 1600, voting's last 0.70 + s/100 against the long control's 0.7
    assert row["generated_tokens"].values == pytest.approx((0.0, 0.01, 0.02))
    # time: voting's 80 s against the long control at 80 s (its step 8: 0.5)
    assert row["wall_seconds"].values == pytest.approx((0.20, 0.21, 0.22))
    assert row["reach"]["generated_tokens"].values == (1.0, 1.0, 1.0)
    head, (body,) = render.matched_rows(grid(), long_controls())
    assert body[head.index("equal wall time")] == "+21.0 [+18.5, +23.5] (3 seeds)"
    page = render.curve_figures(grid(), long_controls())
    # the longer control by tokens and by time, the grid's own by problems: each chart names its control alike
    long_label, own_label = page.count("SA-RL control · long ("), page.count("SA-RL control (")
    assert long_label > 0 and long_label == 2 * own_label


def test_a_control_grid_of_several_method_cells_is_refused_by_name():
    with pytest.raises(ValueError, match=r"long: holds no control and 2 method cells"):
        matching.comparisons(grid(), long_controls(("single", "other")))


def test_longer_controls_that_pair_with_no_cell_are_refused_by_name():
    other_seeds = long_controls()
    for r in other_seeds.runs:
        r.labels["seed"] = str(int(r.labels["seed"]) + 10)
    with pytest.raises(ValueError, match=r"long: no finished run there shares a seed and setting"):
        matching.comparisons(grid(), other_seeds)
