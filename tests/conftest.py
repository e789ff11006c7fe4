"""Shared fixtures: a tiny randomly initialised Qwen3 saved like a real checkpoint."""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("MPLCONFIGDIR", "/tmp/rolecall-mpl")
# Real models (tests/test_real_model.py) are fetched once per machine into the usual models folder;
# built-in corpora and search indexes go to a folder of this session, never the user's cache.
os.environ.setdefault("ROLECALL_MODELS", str(__import__("rolecall.paths").paths.cache_dir("models")))
os.environ["ROLECALL_CACHE"] = __import__("tempfile").mkdtemp(prefix="rolecall-cache-")

import pytest
import torch

torch.set_num_threads(2)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A 2-layer Qwen3 with the character tokenizer, in HF format (config.json, safetensors, tokenizer)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from rolecall.basemodel.tokenizer import build_tokenizer

    d = tmp_path_factory.mktemp("tiny-qwen3")
    tok = build_tokenizer()
    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=512,
                      tie_word_embeddings=True, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    model = Qwen3ForCausalLM(cfg)
    model.save_pretrained(d)
    tok.save_pretrained(d)
    return d


def _sandbox_problem() -> str | None:
    from rolecall.rewards.code import CodeSandbox, SandboxUnavailable

    try:
        CodeSandbox()
    except SandboxUnavailable as e:
        return str(e)
    return None


@pytest.fixture(scope="session")
def isolated_sandbox():
    """Skip (naming why) where the machine cannot isolate model-written code."""
    problem = _sandbox_problem()
    if problem:
        pytest.skip(f"no isolated code sandbox on this machine: {problem}")


LENGTH_REWARD = "def reward(problem, answer):\n    return len(answer) % 3 / 2\n"


def train_moving_run(here, cfg: dict, name: str):
    """A short run whose adapters move on a tiny random model: it never answers right, so a
    custom reward of the reply's length (`length_reward:reward`, written into `here`) gives the
    groups spread. Runs from `here`, where the reward module sits."""
    import rolecall

    (here / "length_reward.py").write_text(LENGTH_REWARD)
    cfg = {**cfg, "reward": {"name": "length_reward:reward"}}
    cwd = os.getcwd()
    os.chdir(here)
    try:
        return rolecall.train_run(cfg, here / name, notify=lambda text: None)
    finally:
        os.chdir(cwd)
