"""`--out` never touches what rolecall did not write: a folder holding anything else is refused
before a byte is written, and a new run's folder is made only once every input has loaded."""
from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from rolecall.api import evaluate, train_run
from rolecall.cli import app
from rolecall.config import load_config
from rolecall.rundir.ownership import MARKER, RunDirRefused, check_new_run_dir


def _overrides(model_dir, *extra) -> list[str]:
    return [f"model.path={model_dir}", "rollout.problems_per_step=2", "rollout.group_size=2",
            "rollout.max_new_tokens=4", "task.n_val=4", "train.threads=1", "train.diagnostics=basic", *extra]


def _files(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _users_folder(tmp_path):
    """A user's own folder, as found in use: their commented config and their own samples."""
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "config.yaml").write_text("# my notes: keep these comments\nworkflow:\n  name: voting\n")
    (folder / "samples.jsonl").write_text('{"mine": 1}\n')
    (folder / "val_samples.jsonl").write_text('{"mine": 2}\n')
    (folder / "summary.json").write_text('{"mine": 3}\n')
    return folder


@pytest.mark.parametrize("extra", [[], ["model.path=/nonexistent.gguf"]])
def test_a_users_folder_is_refused_before_a_byte_is_written(tiny_model_dir, tmp_path, monkeypatch, extra):
    folder = _users_folder(tmp_path)
    before = _files(folder)
    monkeypatch.chdir(folder)
    res = CliRunner().invoke(app, ["train", "config.yaml", *_overrides(tiny_model_dir, *extra), "--steps", "1",
                                   "--out", "."])
    assert res.exit_code == 2, res.output
    assert "is not empty and is not a rolecall run" in res.output and "config.yaml" in res.output, res.output
    assert "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1, res.output
    assert _files(folder) == before, "every file the user had is byte-identical, and nothing was added"


def test_the_python_api_refuses_the_same_folder(tiny_model_dir, tmp_path):
    folder = _users_folder(tmp_path)
    before = _files(folder)
    with pytest.raises(RunDirRefused, match="not a rolecall run"):
        train_run(load_config(None, _overrides(tiny_model_dir, "train.steps=1")), folder)
    assert _files(folder) == before


@pytest.mark.parametrize("model", ["/nonexistent.gguf", "EMPTY_DIR"])
def test_a_model_that_cannot_load_leaves_no_folder_behind(tiny_model_dir, tmp_path, model):
    if model == "EMPTY_DIR":
        (tmp_path / "no-model").mkdir()
        model = str(tmp_path / "no-model")
    out = tmp_path / "new" / "run"
    res = CliRunner().invoke(app, ["train", *_overrides(tiny_model_dir, f"model.path={model}"), "--steps", "1",
                                   "--out", str(out)])
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert not out.exists(), "every check that can fail runs before the folder is made"
    # An empty folder the user made stays empty too.
    empty = tmp_path / "empty"
    empty.mkdir()
    res = CliRunner().invoke(app, ["train", *_overrides(tiny_model_dir, f"model.path={model}"), "--steps", "1",
                                   "--out", str(empty)])
    assert res.exit_code == 2 and list(empty.iterdir()) == [], res.output


def test_a_run_with_steps_is_never_started_over_and_a_failed_start_can_be(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    cfg = load_config(None, _overrides(tiny_model_dir, "train.steps=1"))
    train_run(cfg, out)
    assert (out / MARKER).is_file()
    before = _files(out)
    res = CliRunner().invoke(app, ["train", *_overrides(tiny_model_dir), "--steps", "1", "--out", str(out)])
    assert res.exit_code == 2 and "already holds a run; use --resume" in res.output, res.output
    assert _files(out) == before
    # rolecall's own folder from a start that failed (marked, nothing logged) is started again.
    started = tmp_path / "started"
    started.mkdir()
    (started / MARKER).write_text("{}\n")
    (started / "config.yaml").write_text("stale: true\n")
    (started / "metrics.jsonl").write_text("")
    train_run(cfg, started)
    assert json.loads((started / "summary.json").read_text())


def test_a_run_made_before_the_marker_still_resumes_and_evaluates(tiny_model_dir, tmp_path):
    out = tmp_path / "old"
    train_run(load_config(None, _overrides(tiny_model_dir, "train.steps=1")), out)
    (out / MARKER).unlink()  # as an older rolecall left it
    with pytest.raises(RunDirRefused, match="already holds a run"):
        check_new_run_dir(out)
    train_run(None, out, resume=True, steps=2)
    assert evaluate(out)["checkpoint"].endswith("step_2")


def test_leftovers_of_rolecall_itself_do_not_block_a_new_run(tmp_path):
    cell = tmp_path / "cell"
    cell.mkdir()
    (cell / ".lock").write_text("{}")
    (cell / "grid-failed.traceback").write_text("...")
    check_new_run_dir(cell)  # no error
    (cell / "notes.txt").write_text("mine")
    with pytest.raises(RunDirRefused, match="notes.txt"):
        check_new_run_dir(cell)
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(RunDirRefused, match="is a file"):
        check_new_run_dir(target)


def test_library_chatter_never_creates_the_folder_before_the_run_does(tmp_path):
    import logging
    import warnings

    from rolecall.library_logs import library_output_to
    from rolecall.rundir.ownership import is_run

    out = tmp_path / "later"
    with library_output_to(out, ready=is_run):
        logging.getLogger("transformers").warning("loading weights")
        warnings.warn("while loading", UserWarning)
        assert not out.exists()
        out.mkdir()
        (out / MARKER).write_text("{}\n")
        logging.getLogger("transformers").warning("after the folder is the run's")
    text = (out / "library.log").read_text()
    assert "loading weights" in text and "while loading" in text and "after the folder" in text
    shutil.rmtree(out)


def test_make_base_never_writes_over_a_users_folder(tmp_path):
    folder = _users_folder(tmp_path)
    (folder / "config.json").write_text('{"mine": 4}\n')
    before = _files(folder)
    res = CliRunner().invoke(app, ["make-base", "--out", str(folder), "--episodes", "0", "--fact-steps", "0"])
    assert res.exit_code == 2 and "holds no model built by make-base" in res.output, res.output
    assert _files(folder) == before
