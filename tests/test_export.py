"""rolecall export / generate: a trained policy leaves the run and loads with plain transformers + PEFT."""
from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

import rolecall
from rolecall.cli import app
from conftest import train_moving_run

PROMPT = "Solve. Put the final answer in \\boxed{}.\n12+30"


@pytest.fixture(scope="module")
def trained(tiny_model_dir, tmp_path_factory):
    """Two steps on the tiny random model. It never answers right, so the reward is a function of
    the reply's length (a custom reward): the groups differ and the adapters move."""
    cfg = {"model": {"path": str(tiny_model_dir)}, "task": {"n_val": 4}, "optim": {"lr": 0.05},
           "rollout": {"problems_per_step": 2, "group_size": 4, "max_new_tokens": 6},
           "train": {"steps": 2, "val_every": 1, "checkpoint_every": 1}}
    return train_moving_run(tmp_path_factory.mktemp("run"), cfg, "r")


def _inputs(tok):
    text = tok.apply_chat_template([{"role": "user", "content": PROMPT}], tokenize=False, add_generation_prompt=True)
    return tok(text, add_special_tokens=False, return_tensors="pt")


def test_an_adapter_export_loads_with_plain_peft_and_generates_what_rolecall_generates(trained, tiny_model_dir, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    (gen_dir, agg_dir) = sorted(rolecall.export_run(trained.path, tmp_path / "x"), key=lambda p: p.name != "generator")
    assert gen_dir.name == "generator" and agg_dir.name == "aggregator"
    card = (gen_dir / "README.md").read_text()
    assert "`voting`" in card and "`generator`" in card and "| training steps | 2 |" in card
    acc = next(r["val/accuracy"] for r in trained.metrics if r["step"] == 2 and "val/accuracy" in r)
    assert f"{acc:.3f}" in card

    base_dir = json.loads((gen_dir / "adapter_config.json").read_text())["base_model_name_or_path"]
    tok = AutoTokenizer.from_pretrained(gen_dir)
    base = AutoModelForCausalLM.from_pretrained(base_dir)
    with torch.no_grad():
        base_logits = base(**_inputs(tok)).logits
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir), str(gen_dir)).eval()
    inputs = _inputs(tok)
    with torch.no_grad():
        logits = model(**inputs).logits
        ids = model.generate(**inputs, max_new_tokens=8, do_sample=False, pad_token_id=tok.pad_token_id)
    assert not torch.allclose(logits, base_logits, atol=1e-4), "the adapter must change the model"
    plain = tok.decode(ids[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
    ours = rolecall.generate(trained, "generator", PROMPT, max_new_tokens=8)
    assert ours == plain

    # merged: the same tokens from transformers alone
    (merged,) = [p for p in rolecall.export_run(trained.path, tmp_path / "m", merge=True) if p.name == "generator"]
    assert not (merged / "adapter_config.json").exists() and (merged / "config.json").exists()
    full = AutoModelForCausalLM.from_pretrained(merged).eval()
    with torch.no_grad():
        assert torch.allclose(full(**inputs).logits, logits, atol=1e-4)
        ids = full.generate(**inputs, max_new_tokens=8, do_sample=False, pad_token_id=tok.pad_token_id)
    assert tok.decode(ids[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True) == plain
    # tied embeddings stay tied: the head is still the embedding matrix
    assert torch.equal(full.get_output_embeddings().weight, full.get_input_embeddings().weight)


def test_export_and_generate_from_the_command_line(trained, tmp_path):
    res = CliRunner().invoke(app, ["export", str(trained.path), "--step", "1", "--out", str(tmp_path / "e")])
    assert res.exit_code == 0, res.output
    assert "| training steps | 1 |" in (tmp_path / "e" / "aggregator" / "README.md").read_text()
    res = CliRunner().invoke(app, ["export", str(trained.path), "--step", "1", "--out", str(tmp_path / "e")])
    assert res.exit_code != 0 and "exists and is not empty; pass --force" in res.output
    res = CliRunner().invoke(app, ["export", str(trained.path), "--step", "7"])
    assert res.exit_code != 0 and "no checkpoint of step 7" in res.output
    res = CliRunner().invoke(app, ["generate", str(trained.path), "--role", "aggregator", "--prompt", PROMPT,
                                   "--max-new-tokens", "4"])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(app, ["generate", str(trained.path), "--role", "judge", "--prompt", "x"])
    assert res.exit_code != 0 and "not a role of 'voting'" in res.output
