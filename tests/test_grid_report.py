"""The grid report's numbers, files and page, and the grid's record, all read
from run directories the fake runner writes (tests/grid_fakes.py): numbers checked by hand."""
from __future__ import annotations

import csv
import json
import shutil
import subprocess

import pytest

from rolecall.grid import tables
from rolecall.grid.plan import make_plan
from rolecall.grid.render import write_report
from rolecall.grid.runner import run_grid
from rolecall.grid.spec import load_grid
from rolecall.rundir import sitting

from grid_fakes import ACC, SMALL, FakeRunner, grid_file


@pytest.fixture
def small_plan(tmp_path):
    return make_plan(load_grid(grid_file(tmp_path, SMALL)))


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


def test_a_grid_record_holds_every_cell_and_the_matched_comparisons(finished):
    """`rolecall grid record`'s record of a grid directory: each cell with its curve and
    statistics, and each cell's paired differences against the control."""
    from rolecall.grid.record import collect

    doc = json.loads(json.dumps(collect(finished)))  # what a record file holds: plain JSON
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


def test_a_grid_record_reads_long_controls_at_equal_tokens_and_time(finished, tmp_path, monkeypatch):
    """With the long controls' grid (configs/grids/real_long_control.yaml), the comparisons at equal
    tokens and time read those controls; equal problems keeps the grid's own control."""
    from rolecall.grid.record import collect

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


def test_grid_record_writes_the_record_with_its_provenance_and_refuses_a_directory_that_is_no_grid(finished, tmp_path):
    from typer.testing import CliRunner

    from rolecall.cli import app

    into = tmp_path / "out" / "record.json"
    res = CliRunner().invoke(app, ["grid", "record", str(finished), "--into", str(into)])
    assert res.exit_code == 0, res.output
    doc = json.loads(into.read_text())
    assert doc["what"] == "rolecall grid" and doc["cells"]["done"] == 7
    prov = doc["provenance"]
    assert prov["command"].startswith("rolecall ") and "grid record" in prov["command"]
    assert prov["code"] == sitting.code_version() and prov["machine"]["cores"] >= 1 and "torch" in prov["versions"]
    bad = CliRunner().invoke(app, ["grid", "record", str(tmp_path), "--into", str(tmp_path / "x.json")])
    assert bad.exit_code == 2 and "is not a grid directory" in bad.output and not (tmp_path / "x.json").exists()
