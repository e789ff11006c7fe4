"""`rolecall grid --ray`: each cell a task on a local Ray instance with 2 CPUs, one CPU a
cell, so two cells run at once in separate worker processes. The cells write the same run
directories and markers as the sequential executor: a failing cell and a worker that dies
are both recorded failed while the rest finish, and a later sequential resume skips what
Ray finished."""
from __future__ import annotations

import csv
import json
import shutil
import signal
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rolecall.cli import app
from rolecall.grid import layout
from rolecall.grid.plan import make_plan
from rolecall.grid.runner import run_grid
from rolecall.grid.spec import GridError, load_grid

ray = pytest.importorskip("ray", reason="Ray is in the test extras: pip install -e '.[test]'")
from rolecall.grid.ray_executor import RayExecutor  # noqa: E402

from ray_cells import TimedFake  # noqa: E402
from grid_fakes import ACC, SMALL, FakeRunner, grid_file  # noqa: E402

TESTS = Path(__file__).resolve().parent


class Recorder:
    """A listener: what the driver was told while the cells ran elsewhere."""

    def __init__(self):
        self.events, self.finished_ = [], []

    def started(self, job):
        pass

    def event(self, job, kind, row):
        self.events.append((job.cell.name, kind, row["step"]))

    def finished(self, result):
        self.finished_.append(result)


@pytest.fixture
def ray_env(monkeypatch, tmp_path):
    monkeypatch.setenv("PYTHONPATH", str(TESTS))  # the workers import ray_cells and grid_fakes
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.chdir(tmp_path)
    temp = tempfile.mkdtemp(prefix="rc-ray-", dir="/tmp")  # Ray's socket paths must stay under 107 bytes
    term = signal.getsignal(signal.SIGTERM)
    yield temp
    assert not ray.is_initialized()  # the executor shut down the instance it started
    assert signal.getsignal(signal.SIGTERM) is term  # and gave the process its own SIGTERM handling back
    shutil.rmtree(temp, ignore_errors=True)


def test_cells_run_two_at_a_time_as_ray_tasks_and_failures_stay_in_their_cells(tmp_path, ray_env):
    plan = make_plan(load_grid(grid_file(tmp_path, SMALL)))
    out = tmp_path / "grid"
    seen = Recorder()
    executor = RayExecutor(local_cpus=2, cpus_per_cell=1, listener=seen, poll_s=0.2,
                           temp_dir=ray_env)
    (tmp_path / "started").mkdir()
    runner = TimedFake(str(tmp_path / "started"), fail={"voting-shared-seed1"}, crash={"control-seed1"})
    results = {r.name: r for r in run_grid(plan, out, runner, executor=executor, listener=seen)}

    assert set(results) == set(ACC)
    assert results["voting-shared-seed1"].status == "failed"
    assert "the verifier fell over" in results["voting-shared-seed1"].error
    assert results["control-seed1"].status == "failed" and results["control-seed1"].error.startswith("Ray task failed")
    assert layout.status(out / "control-seed1") == ("failed", results["control-seed1"].error)
    done = [n for n, r in results.items() if r.status == "done"]
    assert len(done) == 5 and all(layout.status(out / n)[0] == "done" for n in done)

    # each finished cell ran in a worker process, in the driver's directory; two ran at once
    workers = {n: json.loads((out / n / "worker.json").read_text()) for n in done}
    assert all(w["cwd"] == str(tmp_path) for w in workers.values())
    spans = sorted((w["start"], w["end"]) for w in workers.values())
    assert any(b[0] < a[1] for a, b in zip(spans, spans[1:])), spans
    assert len({w["pid"] for w in workers.values()}) >= 2

    # the driver read validation rows from the cells' metrics.jsonl as they were written
    assert ("voting-isolated-seed0", "val", 10) in seen.events
    assert len(seen.finished_) == 7

    # a sequential resume skips what Ray finished and retries only the failed cells
    again = FakeRunner()
    results = run_grid(plan, out, again, resume=True)
    assert sorted(again.calls) == ["control-seed1", "voting-shared-seed1"]
    assert all(r.status in ("done", "skipped") for r in results)


def test_a_request_no_node_can_meet_is_refused_naming_the_cell(tmp_path, ray_env):
    plan = make_plan(load_grid(grid_file(tmp_path, SMALL)))
    executor = RayExecutor(local_cpus=2, cpus_per_cell=3, temp_dir=ray_env)
    with pytest.raises(GridError, match=r"cell base asks Ray for 3 CPU and 0 GPU, but the cluster has 2 CPU"):
        run_grid(plan, tmp_path / "grid", FakeRunner(), executor=executor)


def test_an_unreachable_cluster_is_a_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    plan = make_plan(load_grid(grid_file(tmp_path, SMALL)))
    with pytest.raises(GridError, match="could not start or join the Ray cluster at '127.0.0.1:9'"):
        run_grid(plan, tmp_path / "grid", FakeRunner(), executor=RayExecutor(address="127.0.0.1:9"))
    assert not ray.is_initialized()


@pytest.mark.parametrize("argv, address", [(["--ray"], None), (["--ray", "train.steps=20"], None),
                                            (["--ray", "auto"], "auto"), (["--ray", "10.0.0.2:6379"], "10.0.0.2:6379"),
                                            (["--ray", "ray://head:10001", "--cell-cpus", "2"], "ray://head:10001")])
def test_cli_ray_flag_with_and_without_an_address(tmp_path, monkeypatch, argv, address):
    """`--ray` alone is a local instance; the next word is its address only when it looks like one."""
    import rolecall.grid.cells as cells
    import rolecall.grid.plan as plan
    import rolecall.grid.ray_executor as rex
    from rolecall.grid.runner import SequentialExecutor

    made = []

    class Fake(SequentialExecutor):
        remote = False

        def __init__(self, **kw):
            made.append(kw)

    monkeypatch.setattr(rex, "RayExecutor", Fake)
    monkeypatch.setattr(cells, "run_cell", FakeRunner())
    monkeypatch.setattr(plan, "preflight_inputs", lambda p, report=None: 0)
    g = grid_file(tmp_path, SMALL)
    args = ["grid", str(g), *argv, "--out", str(tmp_path / "a")]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert made and made[0]["address"] == address
    assert made[0]["cpus_per_cell"] == (2.0 if "--cell-cpus" in argv else 1.0) and made[0]["gpus_per_cell"] is None


REAL = """
overrides: {train.steps: 2, train.val_every: 2, train.checkpoint_every: 2, task.n_val: 8,
            rollout.problems_per_step: 2, rollout.group_size: 2, train.samples_per_step: 0, train.val_samples: 0}
axes:
  workflow: [voting]
  routing: [isolated]
"""


def test_a_real_grid_trains_on_local_ray_and_reports(tmp_path, ray_env):
    """The real cell runner in Ray workers: the embedded model trains 2 steps per cell, each
    worker on one torch thread, and the report reads what the workers wrote."""
    from rolecall.grid.cells import run_cell
    from rolecall.grid.render import write_report

    plan = make_plan(load_grid(grid_file(tmp_path, REAL)))
    out = tmp_path / "grid"
    executor = RayExecutor(local_cpus=2, cpus_per_cell=1, temp_dir=ray_env)
    results = run_grid(plan, out, run_cell, executor=executor)
    assert {r.name: r.status for r in results} == {"base": "done", "control": "done", "voting-isolated": "done"}, results
    peaks = {}
    for name in ("control", "voting-isolated"):
        rows = [json.loads(line) for line in (out / name / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows if "val/accuracy" in r] == [0, 2]
        assert (out / name / "summary.json").is_file()
        peaks[name] = max(r["val/accuracy"] for r in rows if "val/accuracy" in r)
    write_report(out)
    with open(out / "report" / "runs.csv") as f:
        runs = {r["cell"]: r for r in csv.DictReader(f)}
    assert runs["voting-isolated"]["ip_sp"] == "IP"
    assert float(runs["voting-isolated"]["peak"]) == pytest.approx(peaks["voting-isolated"])
