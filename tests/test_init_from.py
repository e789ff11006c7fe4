"""Policies that start from an adapter trained elsewhere, frozen or trainable, and the generator-transfer config."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

import rolecall
from rolecall.cli import app
from rolecall.rundir.init_from import InitFromError
from conftest import train_moving_run


@pytest.fixture(scope="module")
def source_run(tiny_model_dir, tmp_path_factory):
    """A finished single-agent run on the tiny model whose adapter moved (a length reward gives the groups spread)."""
    cfg = {"model": {"path": str(tiny_model_dir)}, "workflow": {"name": "single"}, "task": {"n_val": 4},
           "optim": {"lr": 0.05}, "rollout": {"problems_per_step": 2, "group_size": 4, "max_new_tokens": 6},
           "train": {"steps": 2}}
    return train_moving_run(tmp_path_factory.mktemp("src"), cfg, "single")


def _adapter(run_dir: Path, policy: str) -> dict:
    ckpt = rolecall.read_run(run_dir).latest_checkpoint
    return load_file(str(ckpt / policy / "adapter_model.safetensors"))


def _voting(tiny_model_dir, source, trainable: bool) -> dict:
    return {"model": {"path": str(tiny_model_dir)}, "workflow": {"name": "voting"}, "task": {"n_val": 4},
            "routing": {"generator": "sa_rl", "aggregator": "agg"},
            "policies": {"sa_rl": {"init_from": str(source), "trainable": trainable}, "agg": {}},
            "rollout": {"problems_per_step": 2, "group_size": 2, "max_new_tokens": 4}, "train": {"steps": 1}}


def test_a_frozen_transferred_adapter_stays_bit_identical_while_others_train(source_run, tiny_model_dir, tmp_path):
    src = _adapter(source_run.path, "generator")
    assert any(v.abs().sum() > 0 for k, v in src.items() if "lora_B" in k), "the source adapter must have moved"
    run = rolecall.train_run(_voting(tiny_model_dir, source_run.path, trainable=False), tmp_path / "r",
                             notify=lambda text: None)
    got = _adapter(run.path, "sa_rl")
    assert got.keys() == src.keys() and all(torch.equal(got[k], src[k]) for k in src)
    fp = json.loads((run.path / "fingerprint.json").read_text())["routing"]
    assert set(fp["init_from"]) == {"sa_rl"}


def test_a_trainable_transferred_adapter_starts_from_the_source(source_run, tiny_model_dir):
    from rolecall.train.stack import build_stack
    from peft import get_peft_model_state_dict

    stack = build_stack(rolecall.make_config(_voting(tiny_model_dir, source_run.path, trainable=True)))
    try:
        state = get_peft_model_state_dict(stack.model, adapter_name="sa_rl")
        src = _adapter(source_run.path, "generator")
        assert all(torch.equal(state[k], src[k]) for k in src)
        assert all(p.requires_grad for n, p in stack.model.named_parameters() if ".sa_rl." in n)
    finally:
        stack.verifier.close()


def test_init_from_errors_name_the_policy(source_run, tiny_model_dir, tmp_path):
    from rolecall.train.stack import build_stack

    def build(overrides):
        cfg = rolecall.make_config(_voting(tiny_model_dir, source_run.path, trainable=False), overrides)
        stack = build_stack(cfg)
        stack.verifier.close()

    with pytest.raises(InitFromError, match=r"policies.sa_rl.init_from: the adapter .* has LoRA \{'r': 16"):
        build({"lora.r": 4})
    with pytest.raises(InitFromError, match="policies.sa_rl.init_from: .* is neither a PEFT adapter directory"):
        build({"policies.sa_rl.init_from": str(tmp_path)})
    # a run with two adapters and none named like the policy: name one
    two = rolecall.train_run(_voting(tiny_model_dir, source_run.path, trainable=False), tmp_path / "two",
                             notify=lambda text: None)
    with pytest.raises(InitFromError, match=r"holds adapters \['agg', 'sa_rl'\] and none is named 'other'"):
        build({"routing.generator": "other", "policies": {"other": {"init_from": str(two.path)}, "agg": {}}})


def test_an_adapter_from_another_base_is_refused(source_run, tmp_path):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from rolecall.basemodel.tokenizer import build_tokenizer
    from rolecall.train.stack import build_stack

    tok = build_tokenizer()
    other = tmp_path / "other-base"
    torch.manual_seed(1)
    Qwen3ForCausalLM(Qwen3Config(vocab_size=len(tok), hidden_size=48, intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, head_dim=12,
                                 tie_word_embeddings=True, eos_token_id=tok.eos_token_id,
                                 pad_token_id=tok.pad_token_id)).save_pretrained(other)
    tok.save_pretrained(other)
    with pytest.raises(InitFromError, match="trained on another base model"):
        build_stack(rolecall.make_config(_voting(other, source_run.path, trainable=False)))
    # copied out of its run (no fingerprint to compare), the shapes still give it away
    lone = tmp_path / "lone"
    lone.mkdir()
    for f in ("adapter_model.safetensors", "adapter_config.json"):
        (lone / f).write_bytes((rolecall.read_run(source_run.path).latest_checkpoint / "generator" / f).read_bytes())
    with pytest.raises(InitFromError, match="does not fit this base model"):
        build_stack(rolecall.make_config(_voting(other, lone, trainable=False)))


def test_an_unused_policy_is_warned_about(tiny_model_dir):
    with pytest.warns(UserWarning, match=r"policies: \['spare'\] are played by no role"):
        rolecall.make_config({"routing": "isolated", "policies": {"generator": {}, "aggregator": {}, "spare": {}}})


def test_the_generator_transfer_config_evaluates_a_finished_single_agent_run(source_run, tiny_model_dir):
    for name in ("voting", "eval_opt"):
        res = CliRunner().invoke(app, ["eval", f"paper/transfer/{name}", f"model.path={tiny_model_dir}", "task.n_val=4",
                                       "rollout.max_new_tokens=4", f"policies.sa_rl.init_from={source_run.path}"])
        assert res.exit_code == 0, res.output
        result = json.loads(res.stdout)
        assert 0.0 <= result["val/accuracy"] <= 1.0 and result["checkpoint"] is None
