"""A team on two base models of different sizes and tokenizers, trained in one process."""
from __future__ import annotations

import json
import os
import string

import pytest
import torch
from safetensors.torch import load_file

import rolecall

OTHER_TEMPLATE = ("{% for m in messages %}<bos>{{ m['role'] }}: {{ m['content'] }}<eos>{% endfor %}"
                  "{% if add_generation_prompt %}<bos>assistant: {% endif %}")


def other_tokenizer():
    """A second character tokenizer: other special tokens, another vocabulary order, another chat template."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<bos>", "<eos>", "<unk>"]
    chars = sorted(set(string.printable) - set("\t\r\x0b\x0c"), reverse=True)
    core = Tokenizer(models.WordLevel(vocab={t: i for i, t in enumerate(specials + chars)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.add_special_tokens(specials)
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<eos>", pad_token="<pad>", unk_token="<unk>")
    tok.chat_template = OTHER_TEMPLATE
    return tok


@pytest.fixture(scope="module")
def second_base(tmp_path_factory):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    d = tmp_path_factory.mktemp("second-base")
    tok = other_tokenizer()
    torch.manual_seed(3)
    Qwen3ForCausalLM(Qwen3Config(vocab_size=len(tok), hidden_size=48, intermediate_size=96, num_hidden_layers=3,
                                 num_attention_heads=4, num_key_value_heads=2, head_dim=12,
                                 max_position_embeddings=1024, tie_word_embeddings=False,
                                 eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)).save_pretrained(d)
    tok.save_pretrained(d)
    return d


def _team(tiny_model_dir, second_base, here) -> dict:
    # Rewards spread by the text's characters, not its length: most 6-token answers are equally
    # long, and a draw whose groups all scored alike would move no adapter.
    (here / "length_reward.py").write_text("def reward(problem, answer):\n    return sum(map(ord, answer)) % 3 / 2\n")
    return {"model": {"path": str(tiny_model_dir)}, "workflow": {"name": "orch_workers"}, "task": {"n_val": 4},
            "reward": {"name": "length_reward:reward"}, "optim": {"lr": 0.05},
            "routing": {"orchestrator": "orch", "worker": "solver", "synthesizer": "synth"},
            "policies": {"orch": {"model": str(second_base), "trainable": False},
                         "synth": {"model": str(second_base)}, "solver": {}},
            "rollout": {"problems_per_step": 2, "group_size": 4, "max_new_tokens": 6}, "train": {"steps": 2}}


def test_two_bases_train_their_policies_and_frozen_ones_stay_put(tiny_model_dir, second_base, tmp_path, monkeypatch):
    from peft import get_peft_model_state_dict

    from rolecall.engines.routed import RoutedEngine
    from rolecall.train.stack import build_stack
    from rolecall.train.step import train_step

    monkeypatch.chdir(tmp_path)
    stack = build_stack(rolecall.make_config(_team(tiny_model_dir, second_base, tmp_path)))
    try:
        assert isinstance(stack.engine, RoutedEngine) and len(stack.bases) == 2
        models = stack.models_by_adapter()
        assert models["orch"] is models["synth"] is not models["solver"]
        before = {p: {k: v.clone() for k, v in get_peft_model_state_dict(models[p], adapter_name=p).items()}
                  for p in ("orch", "synth", "solver")}
        row, episodes = train_step(stack, 1)
        after = {p: get_peft_model_state_dict(models[p], adapter_name=p) for p in before}
    finally:
        stack.verifier.close()
    moved = {p: any(not torch.equal(before[p][k], after[p][k]) for k in before[p]) for p in before}
    assert moved == {"orch": False, "synth": True, "solver": True}
    assert {"policy/synth/loss", "policy/solver/loss"} <= set(row) and "policy/orch/loss" not in row
    # each role's prompt was rendered by its own base's chat template and tokenizer
    turn = {t.role: t for t in episodes[0].turns}
    assert turn["synthesizer"].prompt_text.startswith("<bos>user: ") and "<|im_start|>" not in turn["synthesizer"].prompt_text
    assert turn["worker"].prompt_text.startswith("<|im_start|>user")
    other = other_tokenizer()
    assert turn["orchestrator"].prompt_ids == other(turn["orchestrator"].prompt_text, add_special_tokens=False)["input_ids"]


def test_a_heterogeneous_run_checkpoints_per_base_and_refuses_a_changed_base(tiny_model_dir, second_base, tmp_path,
                                                                            monkeypatch):
    import shutil

    from rolecall.rundir.fingerprint import ResumeRefused

    monkeypatch.chdir(tmp_path)
    cfg = _team(tiny_model_dir, second_base, tmp_path)
    run = rolecall.train_run(cfg, tmp_path / "r", notify=lambda text: None)
    ckpt = run.latest_checkpoint
    assert {p.name for p in ckpt.iterdir() if p.is_dir()} == {"orch", "synth", "solver"}
    frozen = load_file(str(ckpt / "orch" / "adapter_model.safetensors"))
    assert all(not v.any() for k, v in frozen.items() if "lora_B" in k)  # never trained: B still zero
    bases = json.loads((run.path / "fingerprint.json").read_text())["model"]["policy_bases"]
    assert set(bases) == {"orch", "synth"} and bases["orch"] == bases["synth"]
    # the export of a policy on the second base carries that base's tokenizer
    (synth,) = [p for p in rolecall.export_run(run.path, tmp_path / "x") if p.name == "synth"]
    assert json.loads((synth / "tokenizer_config.json").read_text())["eos_token"] == "<eos>"
    assert rolecall.generate(run, "synthesizer", "12+30", max_new_tokens=3) is not None

    # the second base changes: a resume is refused, naming it
    changed = tmp_path / "changed-base"
    shutil.copytree(second_base, changed)
    weights = load_file(str(changed / "model.safetensors"))
    from safetensors.torch import save_file

    save_file({k: v + 0.01 for k, v in weights.items()}, str(changed / "model.safetensors"), metadata={"format": "pt"})
    os.replace(changed / "model.safetensors", second_base / "model.safetensors.new")
    original = (second_base / "model.safetensors").read_bytes()
    os.replace(second_base / "model.safetensors.new", second_base / "model.safetensors")
    try:
        with pytest.raises(ResumeRefused, match="model differs"):
            rolecall.train_run(None, run.path, steps=3, resume=True, notify=lambda text: None)
    finally:
        (second_base / "model.safetensors").write_bytes(original)


def test_policies_have_their_own_lora_shape_and_clip(tiny_model_dir, tmp_path, monkeypatch):
    from peft import get_peft_model_state_dict

    from rolecall.train.stack import build_stack

    from rolecall.train.step import train_step

    monkeypatch.chdir(tmp_path)
    (tmp_path / "length_reward.py").write_text("def reward(problem, answer):\n    return len(answer) % 3 / 2\n")
    cfg = rolecall.make_config({
        "model": {"path": str(tiny_model_dir)}, "task": {"n_val": 4}, "reward": {"name": "length_reward:reward"},
        "optim": {"lr": 0.05}, "routing": "isolated",
        "policies": {"generator": {"lora": {"r": 4, "alpha": 8}, "optim": {"grad_clip": 0.5}}, "aggregator": {}},
        "rollout": {"problems_per_step": 2, "group_size": 4, "max_new_tokens": 6}})
    stack = build_stack(cfg)
    try:
        peft_cfg = stack.model.peft_config
        assert (peft_cfg["generator"].r, peft_cfg["generator"].lora_alpha) == (4, 8)
        assert (peft_cfg["aggregator"].r, peft_cfg["aggregator"].lora_alpha) == (16, 32)
        assert stack.optims["generator"].grad_clip == 0.5 and stack.optims["aggregator"].grad_clip == 1.0
        before = {p: {k: v.clone() for k, v in get_peft_model_state_dict(stack.model, adapter_name=p).items()}
                  for p in ("generator", "aggregator")}
        row, _ = train_step(stack, 1)  # the two ranks share every forward through the LoRA router
        for p in before:
            after = get_peft_model_state_dict(stack.model, adapter_name=p)
            assert any(not torch.equal(before[p][k], after[k]) for k in after), p
        assert row["policy/generator/grad_norm"] >= 0
    finally:
        stack.verifier.close()
    fp = rolecall.make_config(cfg).lora_of("generator")
    assert (fp.r, fp.alpha, fp.target_modules) == (4, 8, "all-linear")


def test_a_policy_base_without_a_chat_template_is_named(tiny_model_dir, second_base, tmp_path, monkeypatch):
    import shutil

    from rolecall.compose.bases import BaseModelError
    from rolecall.train.stack import build_stack

    monkeypatch.chdir(tmp_path)
    bare = tmp_path / "bare-base"
    shutil.copytree(second_base, bare)
    (bare / "chat_template.jinja").unlink(missing_ok=True)
    tok_cfg = json.loads((bare / "tokenizer_config.json").read_text())
    tok_cfg.pop("chat_template", None)
    (bare / "tokenizer_config.json").write_text(json.dumps(tok_cfg))
    cfg = _team(tiny_model_dir, second_base, tmp_path)
    cfg["policies"]["synth"]["model"] = str(bare)
    with pytest.raises(BaseModelError, match=r"policies \['synth'\] \(roles \['synthesizer'\]\).*no chat template"):
        build_stack(rolecall.make_config(cfg))
