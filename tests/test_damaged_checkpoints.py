"""A checkpoint that fails its manifest is evidence: resume refuses naming the file and what is
wrong, changes nothing; `--skip-damaged` moves it aside with a copy of the logs and resumes
from the newest good checkpoint (or step 0), saying so."""
from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from rolecall.cli import app
from rolecall.config import load_config
from rolecall.rundir.checkpoint import CheckpointDamaged, damage, resume_point
from rolecall.train.launch import train

ADAPTER = "generator/adapter_model.safetensors"


def _overrides(model_dir, *extra) -> list[str]:
    return [f"model.path={model_dir}", "rollout.problems_per_step=2", "rollout.group_size=2",
            "rollout.max_new_tokens=4", "task.n_val=4", "train.threads=1", "train.diagnostics=basic",
            "train.val_every=100", "train.keep_last=5", *extra]


@pytest.fixture(scope="module")
def two_checkpoints(tiny_model_dir, tmp_path_factory):
    """A finished 4-step run with checkpoints at steps 2 and 4."""
    out = tmp_path_factory.mktemp("damaged") / "run"
    train(load_config(None, _overrides(tiny_model_dir, "train.steps=4", "train.checkpoint_every=2")), out,
          notify=lambda _: None)
    return out


@pytest.fixture
def run(two_checkpoints, tmp_path):
    return shutil.copytree(two_checkpoints, tmp_path / "run")


def _snapshot(run) -> dict[str, bytes]:
    """Every file under the run directory (the lock file only records the last holder)."""
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file() and p.name != ".lock"}


def _steps(run) -> list[int]:
    return [r["step"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "val/accuracy" not in r]


def _truncate(f):
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])


def _flip_a_byte(f):
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))


DAMAGES = {
    "truncated adapter": (lambda c: _truncate(c / ADAPTER), rf"{ADAPTER} is \d+ bytes, the manifest says \d+ \(truncated\)"),
    "altered adapter, same size": (lambda c: _flip_a_byte(c / ADAPTER), rf"{ADAPTER} does not match its SHA-256"),
    "missing trainer state": (lambda c: (c / "trainer_state.pt").unlink(), "trainer_state.pt is missing"),
    "garbled manifest": (lambda c: (c / "checkpoint.json").write_text("{not json"), "checkpoint.json is unreadable"),
}


@pytest.mark.parametrize("kind", list(DAMAGES))
def test_damage_names_the_file_and_what_is_wrong(run, kind):
    ckpt = run / "checkpoints" / "step_4"
    assert damage(ckpt) is None
    hurt, message = DAMAGES[kind]
    hurt(ckpt)
    assert damage(ckpt) is not None
    import re
    assert re.search(message, damage(ckpt)), damage(ckpt)


def test_a_damaged_newest_checkpoint_refuses_resume_and_changes_nothing(tiny_model_dir, run):
    _truncate(run / "checkpoints" / "step_4" / ADAPTER)
    before = _snapshot(run)
    cfg = load_config(run / "config.yaml", [])
    with pytest.raises(CheckpointDamaged, match=rf"checkpoints/step_4: {ADAPTER} is \d+ bytes.*truncated.*"
                                                 r"Nothing was changed or deleted.*newest good checkpoint, step_2.*"
                                                 r"--skip-damaged"):
        train(cfg, run, resume=True, notify=lambda _: None)
    assert _snapshot(run) == before, "a refused resume must not delete or truncate anything"


def test_cli_refuses_with_exit_2_and_no_traceback(run):
    _truncate(run / "checkpoints" / "step_4" / ADAPTER)
    before = _snapshot(run)
    res = CliRunner().invoke(app, ["train", "--resume", str(run)])
    assert res.exit_code == 2 and isinstance(res.exception, SystemExit), res.output
    assert "damaged checkpoint" in res.output and "step_4" in res.output and "Traceback" not in res.output
    assert _snapshot(run) == before
    # eval, export and generate on the same run do not quietly fall back to an older checkpoint either
    for cmd in (["eval", str(run)], ["export", str(run)], ["generate", str(run), "--role", "generator", "--prompt", "1+1"]):
        res = CliRunner().invoke(app, cmd)
        assert res.exit_code == 2 and "damaged checkpoint" in res.output and "step_4" in res.output, (cmd, res.output)
        assert "--skip-damaged" in res.output and "Traceback" not in res.output, res.output
    assert _snapshot(run) == before and not (run / "export").exists()


def test_eval_export_and_generate_skip_a_damaged_latest_only_when_told_and_say_so(run):
    _truncate(run / "checkpoints" / "step_4" / ADAPTER)
    before = _snapshot(run)
    res = CliRunner().invoke(app, ["export", str(run), "--skip-damaged"])
    assert res.exit_code == 0, res.output
    assert "skipping damaged checkpoints/step_4" in res.output and "using step_2" in res.output, res.output
    assert (run / "export" / "step_2").is_dir()
    res = CliRunner().invoke(app, ["generate", str(run), "--role", "generator", "--prompt", "1+1", "--skip-damaged"])
    assert res.exit_code == 0 and "using step_2" in res.output, res.output
    res = CliRunner().invoke(app, ["eval", str(run), "--step", "2"])  # a named sound checkpoint needs no flag
    assert res.exit_code == 0 and '"checkpoint"' in res.output and "step_2" in res.output, res.output
    assert (run / "checkpoints" / "step_4").is_dir(), "nothing moved or deleted"
    assert {k: v for k, v in _snapshot(run).items() if k in before} == before


def test_skip_damaged_moves_it_aside_keeps_the_logs_and_resumes_from_the_newest_good(run):
    _truncate(run / "checkpoints" / "step_4" / ADAPTER)
    metrics_before = (run / "metrics.jsonl").read_bytes()
    said: list[str] = []
    train(load_config(run / "config.yaml", []), run, resume=True, skip_damaged=True, notify=said.append)
    aside = [d for d in (run / "checkpoints" / "damaged").iterdir()]
    assert len(aside) == 1
    assert (aside[0] / "step_4" / ADAPTER).is_file(), "the damaged checkpoint is moved, not deleted"
    assert (aside[0] / "metrics.jsonl").read_bytes() == metrics_before, "the logs as they were are kept"
    assert "step_4" in (aside[0] / "README.txt").read_text() and "truncated" in (aside[0] / "README.txt").read_text()
    assert any("moved damaged step_4" in s and "resuming from step 2" in s for s in said), said
    assert _steps(run) == [1, 2, 3, 4], "steps 3-4 are trained again, once each"
    assert damage(run / "checkpoints" / "step_4") is None


def test_the_only_checkpoint_damaged_resumes_from_step_0_only_when_asked(tiny_model_dir, tmp_path):
    """The case found in use: a 2-step run's only checkpoint with one adapter file truncated."""
    out = tmp_path / "run"
    train(load_config(None, _overrides(tiny_model_dir, "train.steps=2", "train.checkpoint_every=2")), out,
          notify=lambda _: None)
    _truncate(out / "checkpoints" / "step_2" / ADAPTER)
    before = _snapshot(out)
    with pytest.raises(CheckpointDamaged, match=r"step 0 \(no good checkpoint\)"):
        train(load_config(out / "config.yaml", []), out, resume=True, notify=lambda _: None)
    assert _snapshot(out) == before
    said: list[str] = []
    train(load_config(out / "config.yaml", []), out, resume=True, skip_damaged=True, notify=said.append)
    assert any("resuming from step 0" in s for s in said), said
    (aside,) = (out / "checkpoints" / "damaged").iterdir()
    assert (aside / "metrics.jsonl").read_bytes() == before["metrics.jsonl"]
    assert _steps(out) == [1, 2]


def test_a_damaged_older_checkpoint_is_reported_and_left_in_place(run):
    _flip_a_byte(run / "checkpoints" / "step_2" / ADAPTER)
    damaged = (run / "checkpoints" / "step_2" / ADAPTER).read_bytes()
    cfg = load_config(run / "config.yaml", ["train.steps=5"])
    said: list[str] = []
    train(cfg, run, resume=True, notify=said.append)
    assert any("older checkpoint step_2 is damaged" in s for s in said), said
    assert (run / "checkpoints" / "step_2" / ADAPTER).read_bytes() == damaged
    assert _steps(run) == [1, 2, 3, 4, 5]


def test_a_marker_naming_a_missing_checkpoint_is_damage(run):
    shutil.rmtree(run / "checkpoints" / "step_4")
    point = resume_point(run)
    assert point.checkpoint.name == "step_2"
    assert [(p.name, why) for p, why in point.damaged_newer] == [("step_4", "the 'latest' marker names step_4, which is missing")]


def test_a_checkpoint_that_passes_its_manifest_but_cannot_be_read_is_named(run, tiny_model_dir):
    """A checkpoint from before checksums (sizes only) with a same-size corruption: load names the file."""
    ckpt = run / "checkpoints" / "step_4"
    manifest = json.loads((ckpt / "checkpoint.json").read_text())
    del manifest["sha256"]
    (ckpt / "checkpoint.json").write_text(json.dumps(manifest))
    f = ckpt / ADAPTER
    f.write_bytes(b"\xff" * f.stat().st_size)
    assert damage(ckpt) is None
    before = _snapshot(run)
    with pytest.raises(CheckpointDamaged, match="adapter of policy 'generator' cannot be loaded"):
        train(load_config(run / "config.yaml", []), run, resume=True, notify=lambda _: None)
    assert _snapshot(run) == before


def test_a_damaged_line_inside_the_metrics_refuses_resume_naming_it(run):
    lines = (run / "metrics.jsonl").read_text().splitlines()
    lines[2] = lines[2][: len(lines[2]) // 2]  # torn in the middle of the file: not what a kill leaves
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    before = _snapshot(run)
    res = CliRunner().invoke(app, ["train", "--resume", str(run), "--steps", "6"])
    assert res.exit_code == 2 and "metrics.jsonl line 3 is not a JSON row" in res.output, res.output
    assert _snapshot(run) == before


def test_resuming_a_finished_run_says_there_is_nothing_to_train(run):
    said: list[str] = []
    train(load_config(run / "config.yaml", []), run, resume=True, notify=said.append)
    assert any("already at step 4 of train.steps=4: nothing to train" in s for s in said), said
    assert _steps(run) == [1, 2, 3, 4]
