"""Any local HF checkpoint loads like the embedded model: its own chat template (or a file's),
Qwen3 thinking switch, dtype and device fields, and clear errors instead of hub lookups."""
from __future__ import annotations

import shutil

import pytest
import torch

from rolecall.engines.hf import HFEngine
from rolecall.policies.model import load_model, load_tokenizer, resolve_device, resolve_dtype

# A Qwen3-like template fragment: the thinking switch decides whether an empty think block
# is pre-filled (Qwen3 does exactly this when enable_thinking is false).
THINK_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"
    "{% endif %}")


def test_chat_template_file_overrides_and_thinking_switch(tiny_model_dir, tmp_path):
    t = tmp_path / "qwen3.jinja"
    t.write_text(THINK_TEMPLATE)
    tok = load_tokenizer(str(tiny_model_dir), str(t))
    msgs = [{"role": "user", "content": "1+1"}]
    off = HFEngine.__new__(HFEngine)
    off.tok, off.enable_thinking = tok, False
    on = HFEngine.__new__(HFEngine)
    on.tok, on.enable_thinking = tok, True
    assert off.render(msgs).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert on.render(msgs).endswith("<|im_start|>assistant\n")


def test_checkpoint_without_chat_template_needs_one(tiny_model_dir, tmp_path):
    d = tmp_path / "plain"
    shutil.copytree(tiny_model_dir, d)
    for f in d.glob("chat_template*"):
        f.unlink()
    cfg = d / "tokenizer_config.json"
    if cfg.is_file():
        import json

        data = json.loads(cfg.read_text())
        data.pop("chat_template", None)
        cfg.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="model.chat_template"):
        load_tokenizer(str(d))
    with pytest.raises(FileNotFoundError, match="model.chat_template"):
        load_tokenizer(str(d), str(tmp_path / "missing.jinja"))


def test_dtype_and_device_fields(tiny_model_dir, monkeypatch):
    from rolecall.policies import precision

    monkeypatch.setattr(precision, "cpu_flags", lambda: {"avx2"})  # no native bf16: auto is float32
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    monkeypatch.setattr(precision, "cpu_flags", lambda: {"amx_bf16"})  # native and (said to be) faster: bf16
    monkeypatch.setattr(precision, "cached_probe", lambda model_dir=None: 3.0)
    assert resolve_dtype("auto", torch.device("cpu")) == torch.bfloat16
    assert resolve_dtype("bfloat16", torch.device("cpu")) == torch.bfloat16
    assert resolve_device("cpu") == torch.device("cpu")
    model = load_model(str(tiny_model_dir), "bfloat16", "auto")
    assert next(model.parameters()).dtype == torch.bfloat16
    if not torch.cuda.is_available():
        assert model.device.type == "cpu"
        with pytest.raises(RuntimeError, match="model.device"):
            resolve_device("cuda")


def test_missing_model_dir_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="model.path"):
        load_tokenizer(str(tmp_path / "Qwen3-1.7B"))
