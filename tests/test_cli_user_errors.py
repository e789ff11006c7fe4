"""No user error prints a Python traceback: every command, given a bad config, path, dataset,
prompt template, run directory or an unavailable sandbox, prints one message naming the
problem and exits 2."""
from __future__ import annotations

import json
import shutil
import traceback
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rolecall.cli import app
from rolecall.config import load_config
from rolecall.rewards.code import sandbox as sandbox_module
from rolecall.train.launch import train

TINY = ["rollout.problems_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=4", "task.n_val=4",
        "train.threads=1", "train.diagnostics=basic"]


@pytest.fixture(scope="module")
def files(tiny_model_dir, tmp_path_factory):
    d = tmp_path_factory.mktemp("user-errors")
    (d / "broken.yaml").write_text("train: {steps: 2\n")
    (d / "typo_prompts.yaml").write_text("generator: 'Solve $problm'\naggregator: 'Pick: $candidates'\n")
    (d / "list_prompts.yaml").write_text("- just a list\n")
    (d / "bad_rows.jsonl").write_text(json.dumps({"id": "a", "prompt": "1+1", "solution": ""}) + "\n")
    (d / "code.jsonl").write_text(json.dumps({"problem": "add", "tests": json.dumps(
        [{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}])}) + "\n")
    (d / "a_file").write_text("not a directory")
    (d / "twice.yaml").write_text("train:\n  steps: 2\n  steps: 3\n")
    # user workflow modules that exist but fail to import (module names unique to this test)
    (d / "rc_wf_syntax.py").write_text("import os\n\nclass Broken(\n")
    (d / "rc_wf_raises.py").write_text("X = 1\nraise RuntimeError('boom at import')\n")
    (d / "rc_wf_dep.py").write_text("import os\nimport rc_no_such_dependency\n")
    (d / "not_a_run").mkdir()
    (d / "garbage_run").mkdir()
    (d / "garbage_run" / "config.yaml").write_text("::: not yaml :::\n  - [")
    model = f"model.path={tiny_model_dir}"
    no_ckpt = d / "no_checkpoint"
    train(load_config(None, [model, *TINY, "train.steps=1", "train.checkpoint_every=100"]), no_ckpt,
          notify=lambda _: None)
    shutil.rmtree(no_ckpt / "checkpoints")
    bad_model = d / "bad_model"
    shutil.copytree(tiny_model_dir, bad_model)
    (bad_model / "config.json").write_text("{ truncated")
    return d


def _cases(d, model_dir):
    m = f"model.path={model_dir}"
    code = [m, *TINY, "task.name=dataset", "data.format=deepcoder", f"data.path={d / 'code.jsonl'}", "data.test_fraction=0",
            f"data.val_path={d / 'code.jsonl'}", "reward.name=code", "workflow.prompts=code"]
    return {
        "missing config file": (["train", str(d / "nope.yaml")], "does not exist"),
        "config file is not YAML": (["train", str(d / "broken.yaml")], "not valid YAML"),
        "bad override value": (["train", m, "rollout.group_size=abc"], "rollout.group_size"),
        "unknown config key": (["train", m, "train.stepz=3"], "train.stepz"),
        "missing model dir": (["train", "model.path=/nonexistent/model", *TINY], "model.path"),
        "model path is a file": (["train", f"model.path={d / 'a_file'}", *TINY], "model.path"),
        "model config.json broken": (["train", f"model.path={d / 'bad_model'}", *TINY, "--out", str(d / "o1")], "config.json"),
        "missing prompt file": (["train", m, f"workflow.prompts={d / 'nope.yaml'}"], "workflow.prompts"),
        "prompt template typo": (["train", m, f"workflow.prompts={d / 'typo_prompts.yaml'}"], "$problm"),
        "prompt file not a mapping": (["train", m, f"workflow.prompts={d / 'list_prompts.yaml'}"], "workflow.prompts"),
        "unknown workflow module": (["train", m, "workflow.name=no_such_module:Flow"], "workflow.name"),
        "missing dataset": (["train", m, *TINY, "task.name=dataset", f"data.path={d / 'nope.jsonl'}"], "nope.jsonl"),
        "bad dataset row": (["train", m, *TINY, "task.name=dataset", f"data.path={d / 'bad_rows.jsonl'}",
                             "data.test_fraction=0", f"data.val_path={d / 'bad_rows.jsonl'}", "--out", str(d / "o2")],
                            "row 0"),
        "dry run on a bad dataset row": (["train", m, *TINY, "task.name=dataset", f"data.path={d / 'bad_rows.jsonl'}",
                                          "data.test_fraction=0", f"data.val_path={d / 'bad_rows.jsonl'}", "--dry-run"],
                                         "row 0"),
        "--out is a file": (["train", m, *TINY, "--out", str(d / "a_file")], "a_file' is a file"),
        "--out holds a run": (["train", m, *TINY, "--out", str(d / "no_checkpoint")], "already holds a run"),
        "--resume a missing dir": (["train", "--resume", str(d / "nowhere")], "not a run directory"),
        "--resume a dir that is no run": (["train", "--resume", str(d / "not_a_run")], "not a run directory"),
        "--resume a garbled config": (["train", "--resume", str(d / "garbage_run")], "config.yaml"),
        "--skip-damaged without --resume": (["train", "--skip-damaged"], "--skip-damaged only applies"),
        "sandbox cannot isolate (train)": (["train", *code, "--out", str(d / "o3")], "cannot isolate here"),
        "sandbox cannot isolate (dry run)": (["train", *code, "--dry-run"], "cannot isolate here"),
        "eval a missing path": (["eval", str(d / "nowhere")], "nowhere"),
        "eval a dir that is no run": (["eval", str(d / "not_a_run")], "not a run directory"),
        "eval a run without checkpoint": (["eval", str(d / "no_checkpoint")], "has no checkpoint yet"),
        "eval a garbled run config": (["eval", str(d / "garbage_run")], "config.yaml"),
        "sandbox cannot isolate (eval)": (["eval", str(d / "nope.yaml"), *code], "cannot isolate here"),
        "report a missing run": (["report", str(d / "nowhere")], "nowhere"),
        "report into a file's path": (["report", str(d / "no_checkpoint"), "--out", str(d / "a_file" / "r.html")],
                                         "a_file"),
        "inspect bad steps": (["inspect", str(d / "no_checkpoint"), "--role", "generator", "--steps", "x"], "--steps"),
        "make-base into a file's path": (["make-base", "--out", str(d / "a_file" / "model"), "--fact-steps", "1",
                                          "--episodes", "1"], "a_file"),
        "inspect a missing run": (["inspect", str(d / "nowhere"), "--role", "generator"], "nowhere"),
        "verify code with missing tests": (["verify", "code", "--tests", str(d / "nope.json"), "--completion", "-"],
                                           "nope.json"),
        "a key given twice": (["train", str(d / "twice.yaml")], "line 3: duplicate key 'steps' (first on line 2)"),
        "an override ending in .yaml first": (["train", f"workflow.prompts={d / 'nope.yaml'}", m],
                                              "workflow.prompts: cannot read prompt file"),
        "workflow module with a syntax error": (["train", m, "workflow.name=rc_wf_syntax:Broken"],
                                                "workflow.name: cannot import 'rc_wf_syntax:Broken': rc_wf_syntax.py "
                                                "line 3: SyntaxError:"),
        "workflow module raising at import": (["train", m, "workflow.name=rc_wf_raises:Flow", "--dry-run"],
                                              "rc_wf_raises.py line 2: RuntimeError: boom at import"),
        "workflow module missing a dependency": (["train", m, "workflow.name=rc_wf_dep:Flow"],
                                                 "rc_wf_dep.py line 2: ModuleNotFoundError: No module named "
                                                 "'rc_no_such_dependency'"),
        "reasoning-gym option of the wrong type": (["train", m, "task.name=reasoning_gym", "reward.name=reasoning_gym",
                                                    "task.gym=basic_arithmetic",
                                                    "task.gym_options={allow_negation: 'no'}"],
                                                   "task.gym_options.allow_negation: 'no' is not true or false"),
        "infinite learning rate": (["train", m, "optim.lr=inf", "--dry-run"], "optim.lr: Input should be a finite"),
        "verify code --timeout nan": (["verify", "code", "--tests", str(d / "nope.json"), "--completion", "-",
                                       "--timeout", "nan"], "--timeout: must be a finite number, got nan"),
        "verify code --memory-mb negative": (["verify", "code", "--tests", str(d / "nope.json"), "--completion", "-",
                                              "--memory-mb", "-1"], "--memory-mb: must be > 0, got -1"),
        "verify math --deadline inf": (["verify", "math", "--gold", "1", "--completion", "-", "--deadline", "inf"],
                                       "--deadline: must be a finite number, got inf"),
        "verify reasoning_gym --deadline nan": (["verify", "reasoning_gym", "--gym", "chain_sum", "--completion", "-",
                                                 "--deadline", "nan"], "--deadline: must be a finite number"),
        "generate --temperature nan": (["generate", str(d / "nowhere"), "--role", "generator", "--prompt", "x",
                                        "--temperature", "nan"], "--temperature: must be a finite number"),
        "make-base --lr inf": (["make-base", "--out", str(d / "mb"), "--lr", "inf"], "--lr: must be a finite number"),
        "grid --cell-cpus inf": (["grid", "run", str(d / "nope.yaml"), "--cell-cpus", "inf"],
                                 "--cell-cpus: must be a finite number"),
    }


CASE_NAMES = list(_cases(__import__("pathlib").Path("/d"), "/m"))


@pytest.mark.parametrize("case", CASE_NAMES)
def test_a_user_error_is_one_message_and_exit_2(files, tiny_model_dir, monkeypatch, case):
    args, fragment = _cases(files, tiny_model_dir)[case]
    monkeypatch.chdir(files)  # a run without --out starts in ./runs: here, not in the repository
    if "eval" in case and "sandbox" in case:  # eval takes a config file too: give it a real one
        cfg = files / "code_eval.yaml"
        cfg.write_text("")
        args = ["eval", str(cfg), *args[2:]]

    class NoSandbox:
        def __init__(self, *a, **kw):
            raise sandbox_module.SandboxUnavailable("the code sandbox cannot isolate here (no user namespaces)")

    monkeypatch.setattr(sandbox_module, "CodeSandbox", NoSandbox)
    monkeypatch.setattr("rolecall.rewards.code.CodeSandbox", NoSandbox, raising=False)
    monkeypatch.setattr("rolecall.rewards.verifiers.code.CodeSandbox", NoSandbox)
    res = CliRunner().invoke(app, args, input="")
    assert res.exit_code == 2, (res.output, res.exception)
    assert isinstance(res.exception, SystemExit), repr(res.exception)
    assert "Traceback" not in res.output and "error:" in res.output, res.output
    assert fragment in " ".join(res.output.split()), res.output  # the console may wrap a long line


@pytest.mark.parametrize("module", ["rc_wf_syntax:Broken", "rc_wf_raises:Flow"])
def test_a_broken_user_module_is_one_line_saying_how_to_see_the_traceback(files, tiny_model_dir, monkeypatch, module):
    """One line names the file, the line and the error (not importlib's misleading ModuleNotFoundError);
    --debug shows the traceback, down to the user's file."""
    monkeypatch.chdir(files)
    monkeypatch.setenv("ROLECALL_TRACEBACK", "0")  # restored after --debug sets it
    args = ["train", f"model.path={tiny_model_dir}", f"workflow.name={module}", "--dry-run"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    [line] = [x for x in res.output.splitlines() if "workflow.name" in x]
    file = module.partition(":")[0] + ".py"
    assert f"{file} line " in line and "rolecall --debug" in line and "ROLECALL_TRACEBACK=1" in line, line
    assert "No module named" not in res.output, res.output
    res = CliRunner().invoke(app, ["--debug", *args])
    assert res.exit_code != 0 and res.exception is not None
    cause = res.exception.__cause__  # the user's own exception, with its traceback
    if isinstance(cause, SyntaxError):
        assert cause.filename.endswith(file) and cause.lineno == 3
    else:
        assert isinstance(cause, RuntimeError) and traceback.extract_tb(cause.__traceback__)[-1].filename.endswith(file)


@pytest.mark.parametrize("first, config", [
    ("workflow.prompts=my.yaml", None),           # an override whose value ends in .yaml
    ("a.b=1", None),
    ("policies.my-pol.trainable=false", None),
    ("configs/run.yaml", "configs/run.yaml"),
    ("dir/a=b.yaml", "dir/a=b.yaml"),             # a path, not a dotted key, left of `=`
])
def test_the_first_positional_is_an_override_when_left_of_its_equals_is_a_dotted_key(first, config):
    from rolecall.cli.common import split_config_args as _split_args

    path, overrides = _split_args(first, ["x.y=2"])
    assert (str(path) if path else None) == config
    assert overrides == (["x.y=2"] if config else [first, "x.y=2"])


def test_an_existing_config_file_with_equals_in_its_name_is_still_the_config(tmp_path, monkeypatch):
    from rolecall.cli.common import split_config_args as _split_args

    monkeypatch.chdir(tmp_path)
    (tmp_path / "lr=3e-4.yaml").write_text("")
    assert _split_args("lr=3e-4.yaml", []) == (Path("lr=3e-4.yaml"), [])


@pytest.mark.parametrize("fails", [False, True])
def test_eval_closes_its_verifier_on_every_path(tiny_model_dir, tmp_path, monkeypatch, fails):
    from rolecall.compose import parts
    from rolecall.train import step

    run = tmp_path / "run"
    train(load_config(None, [f"model.path={tiny_model_dir}", *TINY, "train.steps=1"]), run, notify=lambda _: None)
    closed: list[bool] = []
    real = parts.build_verifier

    def spied(cfg):
        v = real(cfg)
        close = v.close
        v.close = lambda: (closed.append(True), close())
        return v

    monkeypatch.setattr(parts, "build_verifier", spied)
    if fails:
        def broken(*a, **kw):
            raise OSError(28, "No space left on device", str(run))
        monkeypatch.setattr(step, "validate", broken)
    res = CliRunner().invoke(app, ["eval", str(run)])
    assert res.exit_code == (2 if fails else 0), res.output
    assert closed == [True]
    if not fails:
        assert json.loads(res.stdout[res.stdout.index("{"):])["checkpoint"].endswith("step_1")
