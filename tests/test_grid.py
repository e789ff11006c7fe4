"""rolecall grid: expanding a grid file, validating it up front, running cells with markers
(resume skips finished cells, a failed cell is recorded and the rest run, an interrupt is not a
failure), and both CLI forms. Nothing here trains: cells are run by the fake runner of
tests/grid_fakes.py, which writes the run directory a real one would. The report's numbers are
checked in tests/test_grid_report.py."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from rolecall.cli import app
from rolecall.config import dump_config
from rolecall.grid import layout, tables
from rolecall.grid.plan import make_plan
from rolecall.grid.runner import CellJob, execute_cell, run_grid
from rolecall.grid.spec import GridError, load_grid

from grid_fakes import ACC, SMALL, FakeRunner, grid_file

GRIDS = Path(__file__).resolve().parent.parent / "configs" / "grids"


MATRIX = """
overrides: {train.steps: 20}
axes:
  digits: {d1: {task.digits: 1}, d2: {task.digits: 2}}
  workflow: [voting, eval_opt]
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
