"""Resume: exact across an epoch boundary after a real SIGKILL, and refused (unless forced)
when the model, tokenizer, data, workflow, routing, LoRA or reward differ from the checkpoint's."""
from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading

import pytest
import torch
from typer.testing import CliRunner

from rolecall.cli import app
from rolecall.config import load_config
from rolecall.tasks.arithmetic import ArithmeticTask
from rolecall.rundir.checkpoint import checkpoint_fingerprint, latest_checkpoint
from rolecall.rundir.fingerprint import ResumeRefused, check_resume
from rolecall.compose.parts import build_parts
from rolecall.train.launch import train
from rolecall.train.step import problems_for_step

# Trains in a fresh process and says when each checkpoint is complete.
CHILD = """
import os, sys
from pathlib import Path
from rolecall.config import load_config
from rolecall.train import launch, loop
real = loop.save_checkpoint
def announced(run_dir, step, *a, **kw):
    path = real(run_dir, step, *a, **kw)
    os.write(1, f"saved {step}\\n".encode())
    return path
loop.save_checkpoint = announced
launch.train(load_config(None, sys.argv[2:]), Path(sys.argv[1]))
"""


def _jsonl(path, problems):
    path.write_text("".join(json.dumps({"id": p.uid, "prompt": p.prompt, "solution": p.answer}) + "\n" for p in problems))
    return path


def _lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def _adapters(run):
    from safetensors.torch import load_file

    ckpt = latest_checkpoint(run)
    return {p.name: load_file(str(p / "adapter_model.safetensors")) for p in ckpt.iterdir() if p.is_dir()}


def _kill_after_save(out, overrides, step, log):
    """Start training `out` in a subprocess; SIGKILL it as soon as the checkpoint of `step` is complete."""
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(out), *overrides], stdout=subprocess.PIPE,
                            stderr=log, text=True)

    def watch():
        for line in proc.stdout:
            if line.strip() == f"saved {step}":
                proc.send_signal(signal.SIGKILL)
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    return proc, watcher


def test_resume_after_sigkill_crosses_an_epoch_boundary_on_the_same_trajectory(tmp_path):
    """4 straight steps == 2 steps + SIGKILL + resume + 2 steps, over a 5-problem train set
    (2 problems a step: step 3 takes the last of epoch 0 and the first of epoch 1).

    The embedded model answers some problems right, so rewards are mixed and weights move;
    the single-agent workflow keeps it cheap (the voting one is covered in test_training.py).
    """
    task = ArithmeticTask(digits=2)
    train_file = _jsonl(tmp_path / "train.jsonl", task.train()[:5])
    val_file = _jsonl(tmp_path / "val.jsonl", task.validation()[:2])
    overrides = ["workflow.name=single", "task.name=dataset", f"data.path={train_file}", f"data.val_path={val_file}",
                 "reward.math_checker=strict", "rollout.problems_per_step=2", "rollout.group_size=4",
                 "rollout.max_new_tokens=16", "train.threads=1", "train.steps=4", "train.checkpoint_every=1",
                 "train.val_every=2", "train.samples_per_step=8", "train.keep_last=5"]
    straight, resumed = tmp_path / "a", tmp_path / "b"
    with open(tmp_path / "child.log", "w") as log:
        proc, watcher = _kill_after_save(resumed, overrides, 2, log)
        train(load_config(None, overrides), straight)  # meanwhile
        proc.wait(timeout=600)
        watcher.join(timeout=10)
    assert proc.returncode == -signal.SIGKILL, (tmp_path / "child.log").read_text()[-3000:]
    assert latest_checkpoint(resumed).name == "step_2"
    train(load_config(None, overrides), resumed, resume=True)

    # The problem order wrapped into a second epoch, after the resume point.
    train_P, _ = build_parts(load_config(None, overrides)).problems()
    uids = {s: {r["uid"] for r in _lines(straight / "samples.jsonl") if r["step"] == s} for s in range(1, 5)}
    assert uids == {s: {p.uid for p in problems_for_step(train_P, 2, 0, s)} for s in range(1, 5)}
    first_epoch = [p.uid for s in (1, 2) for p in problems_for_step(train_P, 2, 0, s)]
    assert len(set(first_epoch)) == 4 and len(uids[3] - set(first_epoch)) == 1, "step 3 must straddle two epochs"

    for name in ("samples.jsonl", "val_samples.jsonl"):  # the same sampled episodes, turn by turn
        assert (straight / name).read_text() == (resumed / name).read_text(), name
    strip = lambda rows: [{k: v for k, v in r.items() if not k.startswith(("time/", "mem/"))} for r in rows]  # the machine's, not the run's
    rows = strip(_lines(straight / "metrics.jsonl"))
    assert rows == strip(_lines(resumed / "metrics.jsonl"))
    assert any(r.get("adv/adv_abs_mean", 0) > 0 for r in rows if r["step"] >= 3), "no learning signal after resume"
    a, b = _adapters(straight), _adapters(resumed)
    assert a.keys() == b.keys() and a
    assert any(v.abs().sum() > 0 for pol in a for k, v in a[pol].items() if "lora_B" in k), "weights never moved"
    for pol in a:
        for k in a[pol]:
            torch.testing.assert_close(a[pol][k], b[pol][k], atol=1e-6, rtol=0)


# --- compatibility ------------------------------------------------------------------------------

def _cfg(model_dir, *extra):
    return load_config(None, [f"model.path={model_dir}", "rollout.problems_per_step=2", "rollout.group_size=2",
                              "rollout.max_new_tokens=4", "task.n_val=4", "train.threads=1",
                              "train.diagnostics=basic", "train.steps=1", *extra])


@pytest.fixture(scope="module")
def one_step_run(tiny_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("compat") / "run"
    train(_cfg(tiny_model_dir), out)
    return out


@pytest.fixture
def run(one_step_run, tmp_path):
    return shutil.copytree(one_step_run, tmp_path / "run")


def _other_weights(model_dir, dest):
    """The same architecture and tokenizer with one weight nudged."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(model_dir, dest)
    f = dest / "model.safetensors"
    state = load_file(str(f))
    k = sorted(state)[0]
    state[k] = state[k] + 0.01
    save_file(state, str(f), metadata={"format": "pt"})
    return dest


def _other_tokenizer_bytes(model_dir, dest):
    """The same model (copied elsewhere) with tokenizer.json re-serialized: different bytes."""
    shutil.copytree(model_dir, dest)
    tj = dest / "tokenizer.json"
    tj.write_text(json.dumps(json.loads(tj.read_text()), indent=3))
    return dest


CHANGES = {
    "model": (lambda m, t: [f"model.path={_other_weights(m, t / 'm2')}"],
              r"model differs \(checkpoint: \S+, weights=\w+, now: \S+m2, weights=\w+\)"),
    "tokenizer": (lambda m, t: [f"model.path={_other_tokenizer_bytes(m, t / 'm3')}"], r"^resume refused: tokenizer differs"),
    "dataset": (lambda m, t: ["task.seed=99"], r"dataset differs \(checkpoint: built-in, problems=\w+, task=.*seed=1234, "
                                               r"now: built-in, problems=\w+, task=.*seed=99\)"),
    "workflow": (lambda m, t: ["workflow.options={n_voters: 2}"],
                 r'workflow differs \(checkpoint: options={}, now: options={"n_voters": 2}\)'),
    "routing": (lambda m, t: ["routing=shared"], r"^resume refused: routing differs \(checkpoint: isolated, now: shared\); "
                                                 r"pass --force to resume anyway$"),
    "lora": (lambda m, t: ["lora.r=8"], r"lora differs \(checkpoint: r=16, now: r=8\)"),
    "reward": (lambda m, t: ["reward.format_penalty=0.5"],
               r"reward differs \(checkpoint: format_penalty=0.0, now: format_penalty=0.5\)"),
}


@pytest.mark.parametrize("field", list(CHANGES))
def test_resume_onto_different_inputs_is_refused_naming_the_field(tiny_model_dir, run, tmp_path, field):
    make, message = CHANGES[field]
    # The lock file records who held the directory last; it is not run data.
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file() and p.name != ".lock"}
    with pytest.raises(ResumeRefused, match=message) as e:
        train(_cfg(tiny_model_dir, *make(tiny_model_dir, tmp_path)), run, resume=True)
    assert [d for d in str(e.value).split("; ") if "differs" in d] and str(e.value).count("differs") == 1, str(e.value)
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file() and p.name != ".lock"} == before, \
        "a refusal must change nothing"
    assert latest_checkpoint(run).name == "step_1"


def test_harmless_changes_resume_and_force_overrides_a_refusal(tiny_model_dir, run, recwarn):
    train(_cfg(tiny_model_dir, "train.steps=2", "train.val_every=7", "train.samples_per_step=1"), run, resume=True)
    assert latest_checkpoint(run).name == "step_2"
    assert not [w for w in recwarn if "resuming although" in str(w.message)]
    with pytest.warns(UserWarning, match=r"--force: resuming although reward differs"):
        train(_cfg(tiny_model_dir, "train.steps=3", "reward.format_penalty=0.5"), run, resume=True, force=True)
    # From the forced resume on, checkpoints record what the run now trains on.
    assert checkpoint_fingerprint(latest_checkpoint(run))["reward"]["format_penalty"] == 0.5
    with pytest.raises(ResumeRefused, match=r"format_penalty=0.5, now: format_penalty=0.0"):
        train(_cfg(tiny_model_dir, "train.steps=4"), run, resume=True)


def test_a_checkpoint_without_fingerprint_resumes_only_with_force():
    with pytest.raises(ResumeRefused, match="no fingerprint.*pass --force"):
        check_resume(None, {}, force=False)
    assert check_resume(None, {}, force=True)
    assert check_resume({"routing": {"routing": "isolated"}}, {"routing": {"routing": "isolated"}}, force=False) == []


def test_a_moved_dataset_resumes_but_changed_rows_are_refused(tiny_model_dir, tmp_path):
    rows = [{"prompt": f"{i}+{i}", "solution": str(2 * i)} for i in range(12)]
    data = tmp_path / "d1.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ds = lambda path, steps: _cfg(tiny_model_dir, "task.name=dataset", f"data.path={path}", "data.n_val=2",
                                  "reward.math_checker=strict", f"train.steps={steps}")
    out = tmp_path / "run"
    train(ds(data, 1), out)
    moved = tmp_path / "elsewhere.jsonl"
    shutil.move(data, moved)
    train(ds(moved, 1), out, resume=True)  # same rows, new path: the same data set (no step left to run)
    rows[3]["solution"] = "7"
    moved.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ResumeRefused, match=r"dataset differs \(checkpoint: \S+d1.jsonl, problems=\w+, "
                                            r"now: \S+elsewhere.jsonl, problems=\w+\)"):
        train(ds(moved, 2), out, resume=True)


def test_cli_refuses_a_changed_resume_with_exit_2_unless_forced(one_step_run, tmp_path):
    run = shutil.copytree(one_step_run, tmp_path / "run")
    res = CliRunner().invoke(app, ["train", "--resume", str(run), "routing=shared"])
    assert res.exit_code == 2, res.output
    assert "resume refused: routing differs (checkpoint: isolated, now: shared); pass --force to resume anyway" in res.output
    res = CliRunner().invoke(app, ["train", "--resume", str(run), "--steps", "2"])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(app, ["train", "--resume", str(run), "--force", "reward.format_penalty=0.5", "--steps", "3"])
    assert res.exit_code == 0, res.output
    assert latest_checkpoint(run).name == "step_3"
    res = CliRunner().invoke(app, ["train", "--force", "--out", str(tmp_path / "new")])
    assert res.exit_code == 2 and "--force only applies with --resume" in res.output
