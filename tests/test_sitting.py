"""Which code wrote a run (`rolecall.rundir.sitting`): rolecall's source commit when it runs from
a git clone, and never the commit of a user's repository that merely holds the installed package."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from rolecall.diagnostics.summary import read_sittings, write_summary
from rolecall.rundir import sitting

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _fresh(monkeypatch, package: Path) -> dict:
    monkeypatch.setattr(sitting, "_PACKAGE", package)
    sitting.code_version.cache_clear()
    try:
        return sitting.code_version()
    finally:
        sitting.code_version.cache_clear()


def _git(cwd: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


@needs_git
def test_a_tracked_package_names_its_commit_and_its_own_changes(monkeypatch, tmp_path):
    pkg = tmp_path / "src" / "rolecall"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (tmp_path / "notes.txt").write_text("a")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "x")
    head = _git(tmp_path, "rev-parse", "HEAD")
    assert _fresh(monkeypatch, pkg) == {"rolecall": sitting.code_version()["rolecall"], "commit": head, "dirty": False}
    (tmp_path / "notes.txt").write_text("b")  # outside the package: not rolecall's change
    assert _fresh(monkeypatch, pkg)["dirty"] is False
    (pkg / "__init__.py").write_text("x = 1\n")
    assert _fresh(monkeypatch, pkg)["dirty"] is True


@needs_git
def test_a_package_the_repository_does_not_track_names_no_commit(monkeypatch, tmp_path):
    # a wheel installed into a virtual environment inside a user's repository
    _git(tmp_path, "init", "-q")
    (tmp_path / "mine.py").write_text("")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "user's work")
    pkg = tmp_path / ".venv" / "site-packages" / "rolecall"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    assert _fresh(monkeypatch, pkg)["commit"] is None
    outside = tmp_path.parent / f"{tmp_path.name}-nogit" / "rolecall"
    outside.mkdir(parents=True)
    found = _fresh(monkeypatch, outside)  # no repository at all
    assert (found["commit"], found["dirty"]) == (None, None)


def test_the_summary_lists_each_sitting_in_order(tmp_path, monkeypatch):
    monkeypatch.setattr(sitting, "code_version", lambda: {"rolecall": "0.1.0", "commit": "a" * 40, "dirty": False})
    here = {"cpu": "Some CPU", "cores": 2}
    monkeypatch.setattr(sitting, "machine", lambda: here)
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "reward/mean": 0.5}\n')
    assert write_summary(tmp_path)["sittings"] == []  # a run from before sittings were recorded
    sitting.record(tmp_path, 0)
    monkeypatch.setattr(sitting, "code_version", lambda: {"rolecall": "0.1.0", "commit": "b" * 40, "dirty": True})
    sitting.record(tmp_path, 1)
    with open(tmp_path / sitting.FILE, "a") as f:
        f.write('{"step": 2, "rolec')  # torn by a kill mid-write
    assert write_summary(tmp_path)["sittings"] == [
        {"step": 0, "rolecall": "0.1.0", "commit": "a" * 40, "dirty": False, "machine": here},
        {"step": 1, "rolecall": "0.1.0", "commit": "b" * 40, "dirty": True, "machine": here}]
    assert sitting.describe(read_sittings(tmp_path)) == "aaaaaaa, bbbbbbb+ from step 1"


def test_this_machine_is_named():
    found = sitting.machine()
    assert found["cores"] >= 1
    assert found["cpu"] is None or (isinstance(found["cpu"], str) and found["cpu"] not in ("", "x86_64"))


def test_a_resume_on_another_processor_is_said():
    """Wall-clock seconds are the machine's: a run that moved is named where it moved, once; a
    sitting that stored no processor (written before they were) moved nowhere."""
    def at(step, commit, cpu=None):
        return {"step": step, "commit": commit * 40, "dirty": False, **({"machine": {"cpu": cpu}} if cpu else {})}
    assert sitting.describe([at(0, "a", "EPYC"), at(10, "a", "EPYC"), at(20, "a", "Xeon"), at(30, "a", "Xeon"),
                             at(40, "b", "Xeon")]) == "aaaaaaa, aaaaaaa (on Xeon) from step 20, bbbbbbb from step 40"
    assert sitting.describe([at(0, "a"), at(10, "a", "Xeon"), at(20, "a")]) == "aaaaaaa"


def test_a_staged_trainers_sitting_names_its_stage(tmp_path, monkeypatch):
    """The meta-policy's steps restart per stage: "step 120" alone would not say where a resume began."""
    monkeypatch.setattr(sitting, "code_version", lambda: {"rolecall": "0.1.0", "commit": "a" * 40, "dirty": False})
    sitting.record(tmp_path, 0, "states")
    monkeypatch.setattr(sitting, "code_version", lambda: {"rolecall": "0.1.0", "commit": "b" * 40, "dirty": False})
    sitting.record(tmp_path, 120, "softrank")
    assert [(s["stage"], s["step"]) for s in read_sittings(tmp_path)] == [("states", 0), ("softrank", 120)]
    assert sitting.describe(read_sittings(tmp_path)) == "aaaaaaa, bbbbbbb from softrank step 120"


def test_a_hosted_trainer_says_where_it_starts_before_it_logs(tmp_path):
    """The harness records no sitting by itself (only the trainer knows where a resume goes on,
    after dropping what a killed run logged); a row logged before it says so would be a row no
    sitting covers, so the harness refuses it."""
    from types import SimpleNamespace

    from rolecall.rundir.directory import RunDir
    from rolecall.train.harness import Harness

    run = RunDir(tmp_path)
    launch = SimpleNamespace(resume=False, force=False, stop=None, notify=print, on_event=None)
    stack = SimpleNamespace(workflow=None, train_P=[], val_P=[], actors=None)
    host = Harness(None, run, launch, stack, start=0.0)
    with pytest.raises(RuntimeError, match="resumes_at"):
        host.emit("meta", {"step": 0})
    host.emit("progress", {"done": 1, "total": 2})  # to the caller only: no metric row, no sitting needed
    host.resumes_at(3, "softrank")
    host.emit("meta", {"step": 4})
    assert [(s["stage"], s["step"]) for s in read_sittings(tmp_path)] == [("softrank", 3)]
    assert [r["step"] for r in run.rows()] == [4]
