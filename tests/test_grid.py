"""rolecall grid: expanding a grid file, validating it up front, running cells with markers
(resume skips finished cells, a failed cell is recorded and the rest run), the report's numbers
from hand-written run directories, and both CLI forms. Nothing here trains: cells are run by a
fake runner that writes the run directory a real one would."""
from __future__ import annotations

import csv
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from rolecall.cli import app
from rolecall.config import dump_config
from rolecall.diagnostics.summary import write_summary
from rolecall.grid import layout, tables
from rolecall.grid.plan import make_plan
from rolecall.grid.render import write_report
from rolecall.grid.runner import CellJob, execute_cell, run_grid
from rolecall.grid.spec import GridError, load_grid
from rolecall.rundir import sitting

GRIDS = Path(__file__).resolve().parent.parent / "configs" / "grids"


def grid_file(tmp_path: Path, text: str, name: str = "g.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


MATRIX = """
overrides: {train.steps: 20}
axes:
  digits: {d1: {task.digits: 1}, d2: {task.digits: 2}}
  workflow: [voting, eval_opt]
  routing: [shared, isolated]
  seed: [0, 1]
"""

SMALL = """
overrides: {train.steps: 20, train.val_every: 10}
axes:
  workflow: [voting]
  routing: [shared, isolated]
  seed: [0, 1]
"""


# -- expansion -------------------------------------------------------------------------------------
def test_product_names_roles_and_controls_once_per_setting_and_seed(tmp_path):
    grid = load_grid(grid_file(tmp_path, MATRIX))
    assert {a.name: a.role for a in grid.axes} == {"digits": "setting", "workflow": "method", "routing": "method",
                                                  "seed": "seed"}
    cells = grid.cells()
    by_kind = {k: [c.name for c in cells if c.kind == k] for k in ("base", "control", "run")}
    assert by_kind["base"] == ["base-d1", "base-d2"]
    assert by_kind["control"] == ["control-d1-seed0", "control-d1-seed1", "control-d2-seed0", "control-d2-seed1"]
    assert len(by_kind["run"]) == 2 * 2 * 2 * 2 and len(set(by_kind["run"])) == 16
    assert by_kind["run"][:3] == ["d1-voting-shared-seed0", "d1-voting-isolated-seed0", "d1-eval_opt-shared-seed0"]
    # per setting: its base evaluation, then seed by seed its control and its runs (a stopped grid holds whole seeds)
    assert [c.name for c in cells[:7]] == ["base-d1", "control-d1-seed0", "d1-voting-shared-seed0",
                                           "d1-voting-isolated-seed0", "d1-eval_opt-shared-seed0",
                                           "d1-eval_opt-isolated-seed0", "control-d1-seed1"]
    control = next(c for c in cells if c.name == "control-d2-seed1")
    assert control.labels == {"digits": "d2", "seed": "seed1"}
    assert control.overrides == ("train.steps=20", "task.digits=2", "workflow.name=single", "workflow.options={}",
                                 "routing=isolated", "train.seed=1")
    base = next(c for c in cells if c.name == "base-d1")
    assert "train.seed=0" in base.overrides and base.labels == {"digits": "d1"}  # once, with the first seed
    run = next(c for c in cells if c.name == "d2-eval_opt-isolated-seed1")
    assert run.overrides == ("train.steps=20", "task.digits=2", "workflow.name=eval_opt", "routing=isolated",
                             "train.seed=1")
    # every cell validates, and its config is what the name says
    plan = make_plan(grid)
    cfg = plan.configs["d2-eval_opt-isolated-seed1"]
    assert (cfg.task.digits, cfg.workflow.name, cfg.routing, cfg.train.seed, cfg.train.steps) == (2, "eval_opt", "isolated", 1, 20)
    assert plan.configs["control-d1-seed0"].workflow.name == "single"


def test_names_are_stable_when_an_axis_grows(tmp_path):
    before = {c.name for c in load_grid(grid_file(tmp_path, SMALL)).cells()}
    after = {c.name for c in load_grid(grid_file(tmp_path, SMALL.replace("[0, 1]", "[0, 1, 2]"))).cells()}
    assert before < after and after - before == {"control-seed2", "voting-shared-seed2", "voting-isolated-seed2"}


def test_explicit_method_axes_vars_templates_and_cli_overrides(tmp_path):
    (tmp_path / "presets").mkdir()
    (tmp_path / "presets" / "a.yaml").write_text("train: {steps: 7}\n")
    text = """
config: presets/{flavour}.yaml
vars: {lr: 0.01}
overrides: {optim.lr: "{lr}"}
method: [flavour]
axes:
  flavour: {a: {workflow.prompts: null}}
  task.digits: [1]
control: {config: presets/a.yaml}
"""
    grid = load_grid(grid_file(tmp_path, text), ["lr=2e-05", "train.val_every=5"])
    assert {a.name: a.role for a in grid.axes} == {"flavour": "method", "task.digits": "setting"}
    plan = make_plan(grid)
    cfg = plan.configs["a-1"]  # named in file order
    assert cfg.train.steps == 7 and cfg.optim.lr == 2e-05 and cfg.train.val_every == 5
    assert plan.cells[0].config == str(tmp_path / "presets" / "a.yaml")


def test_method_axes_are_inferred_from_the_keys_they_set(tmp_path):
    text = """
axes:
  task: {math: {workflow.prompts: paper_math}, plain: {workflow.prompts: math}}
  team: {three: {workflow.options.n_voters: 3}}
  route: {gen_only: {routing: {generator: g, aggregator: base}}}
"""
    assert {a.name: a.role for a in load_grid(grid_file(tmp_path, text)).axes} == {
        "task": "setting", "team": "method", "route": "method"}


def test_the_example_in_the_docs_expands_as_it_says(tmp_path):
    doc = (Path(__file__).resolve().parent.parent / "docs" / "grid.md").read_text()
    example = doc.split("```yaml\n", 1)[1].split("```", 1)[0]
    plan = make_plan(load_grid(grid_file(tmp_path, example)))
    assert len(plan.cells) == 22 and "prints its 22 cells" in doc
    assert [c.name for c in plan.cells[:4]] == ["base-easy", "control-easy-seed0", "easy-voting-shared-seed0",
                                                "easy-voting-isolated-seed0"]


@pytest.mark.parametrize("text, args, needle", [
    ("axes: {}\n", [], "`axes` must be a non-empty mapping"),
    ("axes: {routing: []}\n", [], "axis 'routing': empty"),
    ("axes: {routing: [shared]}\nextra: 1\n", [], "unknown key 'extra'"),
    ("axes: {colour: [red]}\n", [], "'colour' is not a config key"),
    ("axes: {w: {a: {wrkflow.name: voting}}}\n", [], "'wrkflow.name' is not a config key"),
    ("axes: {model.path: [/a/x, /b/x]}\n", [], "two values share the label 'x'"),
    ("axes: {routing: [shared, sharde]}\n", [], "cell 'sharde': invalid config: routing:"),
    ("axes: {rollout.group_size: [8, 1]}\n", [], "cell 'base-1' (and 2 more cells): invalid config: rollout.group_size: 1"),
    ("axes: {workflow: [voting, nope]}\n", [], "cell 'nope'"),
    ("overrides: {train.steps: 5}\naxes: {routing: [shared]}\n", ["routing=isolated"], "set by the grid's axis 'routing'"),
    ("axes: {routing: [shared]}\n", ["colour=3"], "neither a var of this grid"),
    ("vars: {corpus: null}\naxes: {routing: [shared]}\n", [], "no value for corpus; pass corpus=VALUE"),
    ("vars: {data: x}\naxes: {routing: [shared]}\n", [], "var 'data' has the name of a config section"),
    ("overrides: {data.path: '{dta}'}\naxes: {routing: [shared]}\n", [], "{dta} names no axis or var"),
    ("config: '{routing}.yaml'\naxes: {routing: [shared]}\n", [], "cell 'base': config: {routing} names no axis or var available here; allowed: none; controls"),
    ("method: [seed]\naxes: {routing: [shared], seed: [0]}\n", [], "'seed' is not a non-seed axis"),
])
def test_bad_grid_files_fail_before_anything_runs_naming_the_problem(tmp_path, text, args, needle):
    with pytest.raises(GridError) as e:
        make_plan(load_grid(grid_file(tmp_path, text), args))
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_the_shipped_real_grid_trains_every_cell_on_the_same_problems():
    plan = make_plan(load_grid(GRIDS / "real.yaml"))
    kinds = [c.kind for c in plan.cells]
    assert kinds.count("run") == 12 and kinds.count("control") == 3 and kinds.count("base") == 1
    trained = [cfg for name, cfg in plan.configs.items() if not name.startswith("base")]
    assert {(c.train.steps, c.rollout.problems_per_step, c.rollout.group_size) for c in trained} == {(80, 4, 4)}
    assert {c.train.stop_below_peak for c in trained} == {None} and {c.model.path for c in trained} == {"smollm2-135m"}
    assert {c.workflow.name for c in trained} == {"single", "voting", "eval_opt"}
    assert {c.train.seed for c in trained} == {0, 1, 2}


def test_the_shipped_smoke_and_cpu_grids_validate():
    smoke, cpu = make_plan(load_grid(GRIDS / "smoke.yaml")), make_plan(load_grid(GRIDS / "cpu.yaml"))
    assert [c.kind for c in smoke.cells].count("run") == 4 and len(smoke.cells) == 6
    assert {cfg.workflow.name for cfg in cpu.configs.values()} == {"single", "eval_opt", "voting", "orch_workers"}
    assert {cfg.routing for n, cfg in cpu.configs.items() if not n.startswith(("base", "control"))} == {"shared", "isolated"}


# -- running: markers, resume, failures ------------------------------------------------------------
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


@pytest.fixture
def small_plan(tmp_path):
    return make_plan(load_grid(grid_file(tmp_path, SMALL)))


def test_resume_skips_cells_with_a_completion_marker_not_with_a_checkpoint(tmp_path, small_plan):
    out = tmp_path / "grid"
    runner = FakeRunner()
    results = run_grid(small_plan, out, runner)
    assert [r.status for r in results] == ["done"] * 7 and len(runner.calls) == 7
    assert all((out / c.name / layout.DONE).is_file() for c in small_plan.cells)
    index = json.loads((out / "grid.json").read_text())
    assert [c["name"] for c in index["cells"]] == [c.name for c in small_plan.cells]
    with pytest.raises(GridError, match="already exists and is not empty; pass --resume"):
        run_grid(small_plan, out, runner)
    # a cell that saved checkpoints but never completed is run again (resuming inside is the runner's job)
    (out / "voting-shared-seed1" / layout.DONE).unlink()
    (out / "voting-shared-seed1" / "checkpoints" / "step_10").mkdir(parents=True)
    again = FakeRunner()
    results = run_grid(small_plan, out, again, resume=True)
    assert again.calls == ["voting-shared-seed1"]
    assert {r.name: r.status for r in results}["voting-shared-seed1"] == "done"
    assert sum(r.status == "skipped" for r in results) == 6


def test_a_failed_cell_is_recorded_with_its_error_and_the_grid_goes_on(tmp_path, small_plan):
    out = tmp_path / "grid"
    runner = FakeRunner(fail={"voting-shared-seed0"})
    results = {r.name: r for r in run_grid(small_plan, out, runner)}
    assert len(runner.calls) == 7  # every cell was tried
    bad = results["voting-shared-seed0"]
    assert bad.status == "failed" and bad.error == "RuntimeError: the verifier fell over; with a second line"
    assert (out / bad.name / layout.FAILED).read_text() == bad.error + "\n"
    assert "Traceback" in (out / bad.name / layout.TRACEBACK).read_text()
    assert not (out / bad.name / layout.DONE).exists()
    assert sum(r.status == "done" for r in results.values()) == 6
    assert layout.status(out / bad.name) == ("failed", bad.error)
    # --resume tries the failed cell again and only that one
    retry = FakeRunner()
    results = {r.name: r for r in run_grid(small_plan, out, retry, resume=True)}
    assert retry.calls == ["voting-shared-seed0"] and results["voting-shared-seed0"].status == "done"
    assert not (out / "voting-shared-seed0" / layout.FAILED).exists()


def test_an_interrupt_stops_the_grid_and_is_not_a_failure(tmp_path, small_plan):
    def interrupted(job, on_event):
        raise KeyboardInterrupt

    job = CellJob(small_plan.cells[0], small_plan.configs[small_plan.cells[0].name], tmp_path / "c")
    with pytest.raises(KeyboardInterrupt):
        execute_cell(job, interrupted)
    assert layout.status(tmp_path / "c")[0] == "pending"


def test_a_cell_refuses_to_continue_under_a_changed_config(tmp_path, small_plan):
    from rolecall.grid.cells import train_cell

    name = "voting-shared-seed0"
    cfg = small_plan.configs[name]
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "config.yaml").write_text(dump_config(cfg.model_copy(update={"routing": "isolated"})))
    with pytest.raises(GridError, match="started with routing='isolated' but the grid now gives 'shared'"):
        train_cell(cfg, tmp_path / "c", lambda kind, row: None)


def test_base_cell_writes_a_run_directory_the_report_reads(tmp_path, small_plan, monkeypatch):
    import rolecall.train.stack as stack_module
    import rolecall.train.step as step_module
    from rolecall.grid.cells import evaluate_base

    closed = []

    class Stack:  # the cell must close the stack (its verifier's processes, any rollout workers)
        close = staticmethod(lambda: closed.append(1))

    monkeypatch.setattr(stack_module, "build_stack", lambda cfg: Stack)
    monkeypatch.setattr(step_module, "validate_episodes", lambda stack, base: ({"val/accuracy": 0.25, "val/reward/mean": 0.25}, [])
                        if base else pytest.fail("not the base model"))
    evaluate_base(small_plan.configs["base"], tmp_path / "base", lambda kind, row: None)
    d = tmp_path / "base"
    assert closed == [1] and json.loads((d / "eval.json").read_text())["val/accuracy"] == 0.25
    assert json.loads((d / "summary.json").read_text())["accuracy"]["final"] == 0.25
    assert yaml.safe_load((d / "config.yaml").read_text())["workflow"]["name"] == "single"


# -- the report's numbers ------------------------------------------------------------------------
@pytest.fixture
def finished(tmp_path, small_plan):
    out = tmp_path / "grid"
    run_grid(small_plan, out, FakeRunner())
    return out


def test_table1_numbers_by_hand(finished):
    g = tables.load(finished)
    rows = {(r["kind"], r["method"]): r for r in tables.table1(g)}
    ctrl, ip, sp = rows[("control", ("", ""))], rows[("run", ("voting", "isolated"))], rows[("run", ("voting", "shared"))]
    assert ctrl["base"].values == (0.30,) and ip["sa_rl"].values == (0.55, 0.65)
    assert ip["peak"].values == (0.80, 0.75) and ip["peak_step"].values == (10, 20)
    assert ip["final"].values == (0.60, 0.75) and ip["workflow_base"].values == (0.40, 0.40)
    assert ip["residual"].values == pytest.approx((0.25, 0.10))  # paired by seed: 0.80 - 0.55, 0.75 - 0.65
    assert ip["cliffs"] == (1, 2)  # seed 0 fell 0.20 from its peak (margin 0.1); seed 1 did not fall
    assert ip["fall"].values == pytest.approx((0.20, 0.0)) and ip["fall_step"].values == (20,)
    # seed 1 fell 0.66 -> 0.50 at step 20 and recovered to 0.64: a cliff, though peak - final is 0.02
    assert sp["cliffs"] == (1, 2) and sp["peak"].values == (0.62, 0.66) and sp["final"].values == (0.62, 0.64)
    assert sp["fall"].values == pytest.approx((0.0, 0.16)) and sp["fall_step"].values == (20,)
    assert ip["alarms"] == "generator: gradient_amplification; run: validation_cliff" and sp["alarms"] == ""
    assert ip["routing"] == "isolated" and ip["peak"].mean == pytest.approx(0.775)
    assert ip["peak"].sd == pytest.approx(0.0353553, rel=1e-5) and (ip["peak"].lo, ip["peak"].hi) == (0.75, 0.80)
    # figures: gain over step 0, IP vs SP, amplitudes
    fig2 = {r["method"]: r["delta"].values for r in tables.fig2(g)}
    assert fig2[("voting", "isolated")] == pytest.approx((0.40, 0.35))
    (pair,) = tables.fig3(g)
    assert pair["method"] == ("voting", "") and pair["ip"].mean == pytest.approx(0.775) and pair["sp"].mean == pytest.approx(0.64)
    fig5 = {r["routing"]: r for r in tables.fig5(g)}
    assert fig5["isolated"]["max_chi2"].values == (0.08, 0.08) and fig5["shared"]["max_grad_norm"].values == (1.0, 1.0)
    assert fig5["isolated"]["entropy_collapse"].values == pytest.approx((0.3, 0.3))


def test_table2_numbers_by_hand(finished):
    rows = {(r["method"], r["entity"]): r for r in tables.table2(tables.load(finished))}
    gen = rows[(("voting", "isolated"), "role generator")]
    assert gen["chi2"].values == pytest.approx((8.0, 8.0)) and gen["chi2_step"].values == (15, 15)  # 0.08 / 0.01
    assert gen["ppl"].values == pytest.approx((1.5, 1.5)) and gen["grad"].values == pytest.approx((2.0, 2.0))
    agg = rows[(("voting", "isolated"), "role aggregator")]
    assert agg["chi2"].n == 0 and agg["not_measurable"] == 2  # χ² 0 throughout: never over its floor, no ratio
    assert (("voting", "shared"), "policy shared") in rows and (("", ""), "role generator") in rows


def test_report_files_markdown_csv_html(finished):
    paths = write_report(finished)
    names = sorted(p.name for p in paths)
    assert names == ["fig2.csv", "fig3.csv", "fig5.csv", "matched.csv", "report.html", "report.md", "runs.csv", "table1.csv",
                     "table2.csv"]
    md = (finished / "report" / "report.md").read_text()
    line = next(x for x in md.splitlines() if x.startswith("| voting | isolated |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells == ["voting", "isolated", "IP", "2/2", "30.0", "60.0 ± 7.1 (55.0–65.0)", "40.0 ± 0.0 (40.0–40.0)",
                     "77.5 ± 3.5 (75.0–80.0)", "15 ± 7 (10–20)", "67.5 ± 10.6 (60.0–75.0)",
                     "+17.5 ± 10.6 (+10.0–+25.0)",
                     "1/2 seeds (margin 10 pp; fall 10.0 ± 14.1 (0.0–20.0) pp at step 20)",
                     "generator: gradient_amplification; run: validation_cliff"]
    assert "| SA-RL control |  | — | 2/2 | 30.0 | 60.0 ± 7.1 (55.0–65.0) | 30.0 ± 0.0 (30.0–30.0) |" in md
    assert "| voting | isolated | role generator | 8.00× ± 0.00 (8.00×–8.00×) | 1.50× ± 0.00 (1.50×–1.50×) |" in md
    assert "| voting | isolated | role aggregator | not measurable |" in md
    with open(finished / "report" / "runs.csv") as f:
        runs = {r["cell"]: r for r in csv.DictReader(f)}
    assert runs["voting-isolated-seed0"]["peak"] == "0.8" and runs["voting-isolated-seed0"]["cliff_flag"] == "True"
    assert float(runs["voting-isolated-seed1"]["residual_vs_control"]) == pytest.approx(0.10)
    with open(finished / "report" / "table1.csv") as f:
        t1 = list(csv.DictReader(f))
    ip = next(r for r in t1 if r["ip_sp"] == "IP")
    assert (ip["workflow"], ip["routing"], ip["peak_n"]) == ("voting", "isolated", "2")
    assert float(ip["peak_mean"]) == pytest.approx(0.775) and float(ip["residual_sd"]) == pytest.approx(0.1060660, rel=1e-5)
    assert runs["voting-isolated-seed0"]["ip_sp"] == "IP" and runs["control-seed0"]["ip_sp"] == ""
    page = (finished / "report" / "report.html").read_text()
    # 5 figures and the 3 matched-cost curves; no script at all
    assert page.count("<svg class=\"chart\"") == 8 and "<script" not in page and "77.5 ± 3.5 (75.0–80.0)" in page


def test_report_of_a_partial_grid_lists_what_is_missing(tmp_path, small_plan):
    out = tmp_path / "grid"
    run_grid(small_plan, out, FakeRunner(fail={"control-seed1", "voting-shared-seed1"}))
    md = write_report(out)[0].read_text()
    assert "| voting | shared | SP | 1/2 |" in md
    assert "| control-seed1 | control | failed | RuntimeError: the verifier fell over; with a second line |" in md


# -- the command line --------------------------------------------------------------------------
@pytest.fixture
def fake_cli(monkeypatch):
    import rolecall.grid.cells as cells
    import rolecall.grid.plan as plan

    runner = FakeRunner()
    monkeypatch.setattr(cells, "run_cell", runner)
    monkeypatch.setattr(plan, "preflight_inputs", lambda p, report=None: 0)  # no model or data opened
    return runner


def test_cli_bare_and_run_forms_and_report(tmp_path, fake_cli):
    g = grid_file(tmp_path, SMALL)
    res = CliRunner().invoke(app, ["grid", str(g), "--out", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    assert "7 runs" not in res.output and "4 runs, 2 controls, 1 base evaluation; 0 failed" in res.output
    assert all((tmp_path / "a" / n / layout.DONE).is_file() for n in ACC)
    res = CliRunner().invoke(app, ["grid", "run", str(g), "--out", str(tmp_path / "a")])
    assert res.exit_code == 2 and "already exists and is not empty" in res.output and str(tmp_path / "a") in res.output
    res = CliRunner().invoke(app, ["grid", "--resume", str(g), "--out", str(tmp_path / "a")])
    assert res.exit_code == 0 and res.output.count("finished earlier") == 7, res.output
    res = CliRunner().invoke(app, ["grid", "report", str(tmp_path / "a"), "--out", str(tmp_path / "rep")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "rep" / "report.html").is_file() and (tmp_path / "rep" / "table1.csv").is_file()
    res = CliRunner().invoke(app, ["grid", "report", str(tmp_path / "a"), "--out", str(tmp_path / "rep2"),
                                   "--controls", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    assert f"against the controls of {tmp_path / 'a'}" in (tmp_path / "rep2" / "report.md").read_text()
    res = CliRunner().invoke(app, ["grid", "report", str(tmp_path / "a"), "--controls", str(tmp_path / "nope")])
    assert res.exit_code == 2 and "not a grid directory" in res.output


def test_cli_failed_cell_exits_1_after_running_the_rest(tmp_path, fake_cli):
    fake_cli.fail = {"voting-isolated-seed1"}
    res = CliRunner().invoke(app, ["grid", str(grid_file(tmp_path, SMALL)), "--out", str(tmp_path / "a")])
    assert res.exit_code == 1 and "1 failed" in res.output and len(fake_cli.calls) == 7


def test_cli_errors_are_one_line(tmp_path, fake_cli):
    res = CliRunner().invoke(app, ["grid", str(grid_file(tmp_path, "axes: {routing: [shared, sharde]}\n")), "--dry-run"])
    assert res.exit_code == 2 and res.output.startswith("error: cell 'sharde': invalid config: routing:")
    assert fake_cli.calls == []
    res = CliRunner().invoke(app, ["grid", "report", str(tmp_path)])
    assert res.exit_code == 2 and "not a grid directory" in res.output
    res = CliRunner().invoke(app, ["grid", str(tmp_path / "missing.yaml")])
    assert res.exit_code == 2 and "does not exist" in res.output


def test_cli_only_runs_a_part_and_the_rest_resumes_into_one_grid(tmp_path, fake_cli):
    g, out = grid_file(tmp_path, SMALL), tmp_path / "a"
    res = CliRunner().invoke(app, ["grid", str(g), "--out", str(out), "--only", "seed=seed1"])
    assert res.exit_code == 0, res.output
    assert fake_cli.calls == ["control-seed1", "voting-shared-seed1", "voting-isolated-seed1"]
    assert "2 runs, 1 control, 0 base evaluations; 0 failed" in res.output
    assert sorted(c["name"] for c in layout.read_index(out)["cells"]) == sorted(ACC)  # the whole grid is indexed
    part = tables.load(out)
    assert {r.name: r.status for r in part.runs}["voting-shared-seed0"] == "pending"
    res = CliRunner().invoke(app, ["grid", str(g), "--out", str(out), "--resume", "--only", "routing=shared",
                                   "--only", "seed=seed1"])  # every label must match: one cell, finished
    assert res.exit_code == 0 and res.output.count("finished earlier") == 1, res.output
    res = CliRunner().invoke(app, ["grid", str(g), "--out", str(out), "--resume"])
    assert res.exit_code == 0 and res.output.count("finished earlier") == 3, res.output
    assert sorted(fake_cli.calls) == sorted(ACC) and all(r.status == "done" for r in tables.load(out).runs)


@pytest.mark.parametrize("only, needle", [
    (["seed"], "give it as AXIS=LABEL"), (["seeds=seed0"], "no axis 'seeds' (its axes: workflow, routing, seed)"),
    (["seed=0"], "axis 'seed' has no value '0' (its values: seed0, seed1)"),
    (["seed=seed0", "seed=seed1"], "names axis 'seed' twice"),
])
def test_cli_only_names_a_bad_filter_and_runs_nothing(tmp_path, fake_cli, only, needle):
    args = [a for o in only for a in ("--only", o)]
    res = CliRunner().invoke(app, ["grid", str(grid_file(tmp_path, SMALL)), "--out", str(tmp_path / "a"), *args])
    assert res.exit_code == 2 and needle in res.output, res.output
    assert fake_cli.calls == [] and not (tmp_path / "a").exists()


def test_cli_dry_run_lists_cells_and_runs_nothing(tmp_path, fake_cli):
    res = CliRunner().invoke(app, ["grid", str(grid_file(tmp_path, SMALL)), "--out", str(tmp_path / "a"), "--dry-run"])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert [x.split("\t")[:2] for x in lines[:2]] == [["base", "base"], ["control-seed0", "control"]]
    assert len(lines) == 7 and "dry run ok: 7 cells" in res.output
    assert fake_cli.calls == [] and not (tmp_path / "a").exists()


def _paper_fixture(tmp_path: Path, tiny_model_dir: Path) -> list[str]:
    models = tmp_path / "models"
    models.mkdir()
    for scale in ("0.6B", "1.7B", "4B"):
        (models / f"Qwen3-{scale}").symlink_to(tiny_model_dir, target_is_directory=True)
    math = tmp_path / "math.jsonl"
    math.write_text("".join(json.dumps({"prompt": f"What is {i}+{i}?", "solution": str(2 * i)}) + "\n" for i in range(20)))
    tests = json.dumps([{"input": "2\n", "output": "4\n", "testtype": "stdin"}])
    code = tmp_path / "code.jsonl"  # 1,000 held out (the paper's code split) + 18 to train on
    code.write_text("".join(json.dumps({"problem": f"Print double ({i}).", "tests": tests, "starter_code": ""}) + "\n"
                            for i in range(1018)))
    return [f"models={models}", f"math_data={math}", f"code_data={code}"]


def test_paper_grid_dry_runs_on_fixture_data(tmp_path, tiny_model_dir, isolated_sandbox):
    args = _paper_fixture(tmp_path, tiny_model_dir)
    res = CliRunner().invoke(app, ["grid", str(GRIDS / "paper.yaml"), *args, "--dry-run"])
    assert res.exit_code == 0, res.output
    cells = [x.split("\t") for x in res.stdout.splitlines()]
    assert len(cells) == 48 and [k for _, k, *_ in cells].count("run") == 36
    by_name = {c[0]: c for c in cells}
    assert by_name["math-1.7B-voting-ip"][2].endswith("configs/paper/math-voting-ip.yaml")
    assert by_name["control-code-4B"][2].endswith("configs/paper/code-single.yaml")
    assert f"model.path={tmp_path / 'models' / 'Qwen3-4B'}" in by_name["base-code-4B"][3]
    assert "dry run ok: 48 cells (36 runs, 6 controls, 6 base evaluations), 6 distinct inputs" in res.output
    plan = make_plan(load_grid(GRIDS / "paper.yaml", args))
    cfg = plan.configs["code-0.6B-eval_opt-sp"]  # the preset's Table 7 values come through
    assert (cfg.workflow.options, cfg.routing, cfg.rollout.max_new_tokens, cfg.optim.lr) == ({"rounds": 2}, "shared", 2048, 2e-5)


def test_paper_grid_names_missing_paths(tmp_path):
    res = CliRunner().invoke(app, ["grid", str(GRIDS / "paper.yaml"), "--dry-run"])
    assert res.exit_code == 2 and "no value for models, math_data, code_data" in res.output


# -- the page in a browser -----------------------------------------------------------------------
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed")
def test_report_page_renders_in_headless_chromium(finished, tmp_path):
    page = write_report(finished)[1]
    dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                          "--disable-background-networking", f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
                          page.resolve().as_uri()], capture_output=True, text=True, timeout=60).stdout
    assert 'data-ready="1"' in dom and dom.count("<svg class=\"chart\"") == 8 and dom.count("<table") >= 6
    assert "Table 1: validation accuracy" in dom and "77.5 ± 3.5 (75.0–80.0)" in dom


def test_real_grid_records_every_cell_and_the_matched_comparisons(finished):
    """benchmarks/real_grid.py's record of a grid directory: each cell with its curve and
    statistics, and each cell's paired differences against the control."""
    from benchmarks.real_grid import collect

    doc = json.loads(json.dumps(collect(finished)))  # what real_grid.json holds: plain JSON
    runs = {r["cell"]: r for r in doc["runs"]}
    assert doc["cells"] == {"done": 7, "failed": 0, "started": 0, "pending": 0}
    ip0 = runs["voting-isolated-seed0"]
    assert (ip0["base"], ip0["peak"], ip0["final"], ip0["fall"]) == (0.40, 0.80, 0.60, pytest.approx(0.20))
    assert [p["accuracy"] for p in ip0["curve"]] == [0.40, 0.80, 0.60] and ip0["alarms"]
    # which code wrote each run: read from its sittings.jsonl (the summary is recomputed from the
    # metric rows, which do not hold it)
    assert all([s["step"] for s in r["sittings"]] == [0] for r in runs.values()), runs
    assert ip0["sittings"][0]["commit"] == sitting.code_version()["commit"]
    (ip,) = [c for c in doc["against_control"] if c["method"] == ["voting", "isolated"]]
    # the fake runs log no costs, so every matching reads the final validations: 0.60 - 0.50, 0.75 - 0.65
    assert ip["problems"]["values"] == pytest.approx([0.10, 0.10]) and ip["paired_with_control"] == 2
    assert ip["peak_vs_own_base"]["mean"] == pytest.approx(0.375) and ip["problems"]["ci95"] is not None


def test_real_grid_keeps_an_earlier_records_runs_when_their_directory_is_gone(finished, tmp_path):
    """A grid whose seed-0 cells ran on a machine since lost: the new directory holds seed 1, the
    record keeps seed 0 from the earlier record (marked so), and the comparisons against the
    control come out as they did from the whole directory."""
    from benchmarks.real_grid import collect, keep_from

    whole = json.loads(json.dumps({**collect(finished), "provenance": {"commit": "abc", "date": "2026-01-01"}}))
    part_dir = tmp_path / "part"
    shutil.copytree(finished, part_dir)
    for name in ("base", "control-seed0", "voting-shared-seed0", "voting-isolated-seed0"):
        shutil.rmtree(part_dir / name)
    part = json.loads(json.dumps(collect(part_dir)))
    assert part["cells"]["pending"] == 4 and all(c["paired_with_control"] == 1 for c in part["against_control"])
    merged = keep_from(part, whole, "earlier.json")
    assert merged["cells"] == whole["cells"] and merged["kept"]["cells"] == ["base", "control-seed0",
                                                                              "voting-shared-seed0",
                                                                              "voting-isolated-seed0"]
    assert merged["against_control"] == whole["against_control"]
    runs = {r["cell"]: r for r in merged["runs"]}
    assert runs["control-seed0"]["kept_from"] == {"result": "earlier.json", "commit": "abc", "dirty": None,
                                                  "date": "2026-01-01", "versions": None, "model_sha256": None}
    assert "kept_from" not in runs["control-seed1"] and runs["voting-shared-seed0"]["curve"] == \
        {r["cell"]: r for r in whole["runs"]}["voting-shared-seed0"]["curve"]
    with pytest.raises(SystemExit, match="axes"):
        keep_from(part, {**whole, "axes": whole["axes"][:1]}, "other.json")


def test_real_grid_reads_long_controls_at_equal_tokens_and_time(finished, tmp_path, monkeypatch):
    """With the long controls' grid (configs/grids/real_long_control.yaml), the comparisons at equal
    tokens and time read those controls; equal problems keeps the grid's own control."""
    from benchmarks.real_grid import collect

    spec = grid_file(tmp_path, "overrides: {train.steps: 20, train.val_every: 10, workflow.name: single,"
                               " routing: isolated}\ncontrol: false\nbase_eval: false\naxes:\n  seed: [0, 1]\n", "long.yaml")
    plan = make_plan(load_grid(spec))
    for cell, accs in zip(plan.cells, ([0.30, 0.70, 0.90], [0.30, 0.60, 0.80])):
        monkeypatch.setitem(ACC, cell.name, accs)
    run_grid(plan, tmp_path / "long", FakeRunner())
    doc = json.loads(json.dumps(collect(finished, tmp_path / "long")))
    (ip,) = [c for c in doc["against_control"] if c["method"] == ["voting", "isolated"]]
    assert ip["problems"]["values"] == pytest.approx([0.10, 0.10])  # the grid's own control
    # no costs logged: each run is read at its final validation; 0.60 - 0.90 and 0.75 - 0.80
    assert ip["wall_seconds"]["values"] == pytest.approx([-0.30, -0.05])
    assert ip["generated_tokens"]["values"] == pytest.approx([-0.30, -0.05])
    assert ip["short_control"]["wall_seconds"]["values"] == pytest.approx([0.10, 0.10])
    assert ip["long_control"] == {"paired": 2, "matchings": ["generated_tokens", "wall_seconds"]}
    assert sum(r["kind"] == "long_control" for r in doc["runs"]) == 2
    assert "long_control" not in collect(finished)["against_control"][0]  # without them, as before
