"""Memory: the micro-batch budget `auto` picks, the run's memory rows and its low-memory warning,
and the two changes that took vocabulary-wide copies out of a step (the last-position index and
the logits read in column blocks) compute what they replaced."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from pydantic import ValidationError

from rolecall.algo import memory
from rolecall.algo.forward import completion_logit_parts, completion_logits, over_parts
from rolecall.loss import token_logprobs_and_entropy
from rolecall.schema import AlgoCfg
from rolecall.train import memory as run_memory

SMOLLM2 = SimpleNamespace(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, vocab_size=49152)


def _model(config, dtype=torch.bfloat16, device="cpu"):
    return SimpleNamespace(config=config, dtype=dtype, device=torch.device(device))


def test_per_token_estimate_follows_the_model_and_its_dtype():
    # per layer: 2 fp32 norm copies of hidden, 8 hidden-wide and 4 MLP-wide tensors; logits and their gradient
    assert memory.activation_bytes_per_token(SMOLLM2, torch.bfloat16) == 30 * (2 * 576 * 4 + (8 * 576 + 4 * 1536) * 2) \
        + 2 * 49152 * 2
    assert memory.activation_bytes_per_token(SMOLLM2, torch.float32) > 1.8 * memory.activation_bytes_per_token(
        SMOLLM2, torch.bfloat16)


def test_auto_fits_a_cpu_budget_and_keeps_the_accelerator_default():
    assert memory.micro_batch_tokens("auto", _model(SMOLLM2)) == 1095  # 1 GiB / 0.98 MB a token
    assert memory.micro_batch_tokens("auto", _model(SMOLLM2, torch.float32)) == 589
    tiny = SimpleNamespace(hidden_size=32, intermediate_size=64, num_hidden_layers=2, vocab_size=100)
    assert memory.micro_batch_tokens("auto", _model(tiny)) == memory.ACCELERATOR_TOKENS  # capped
    huge = SimpleNamespace(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, vocab_size=128256)
    assert memory.micro_batch_tokens("auto", _model(huge)) == memory.MIN_TOKENS  # floored
    assert memory.micro_batch_tokens("auto", _model(SMOLLM2, device="meta")) == memory.ACCELERATOR_TOKENS
    assert memory.micro_batch_tokens(4096, _model(SMOLLM2)) == 4096  # a number is kept as given


def test_schema_takes_auto_or_a_positive_number():
    assert AlgoCfg().micro_batch_tokens == "auto"
    assert AlgoCfg(micro_batch_tokens=4096).micro_batch_tokens == 4096
    for bad in (0, -5, "big"):
        with pytest.raises(ValidationError):
            AlgoCfg(micro_batch_tokens=bad)


def test_watch_adds_the_memory_rows_and_warns_once_when_the_machine_runs_low(monkeypatch):
    watch = run_memory.MemoryWatch("Lower algo.micro_batch_tokens.", 1095)
    monkeypatch.setattr(run_memory, "machine", lambda: (24 * 2**30, 12 * 2**30))
    row: dict = {}
    assert watch.observe(row) is None and row["mem/micro_batch_tokens"] == 1095
    assert row["mem/peak_gb"] > 0 and row["mem/available_gb"] == pytest.approx(12.885, abs=1e-3)
    if run_memory.resident()[0] is not None:  # Linux: resident now, as well as the peak
        assert 0 < row["mem/rss_gb"] <= row["mem/peak_gb"] + 1e-3
    monkeypatch.setattr(run_memory, "machine", lambda: (24 * 2**30, 2**29))  # 0.5 GiB left
    text = watch.observe({})
    assert text is not None and "0.5 GB of 25.8 GB left" in text and "OOM killer" in text and "micro_batch_tokens" in text
    assert watch.observe({}) is None  # said once
    monkeypatch.setattr(run_memory, "machine", lambda: None)  # no /proc/meminfo: figures, no warning
    row = {}
    assert run_memory.MemoryWatch().observe(row) is None and "mem/peak_gb" in row and "mem/available_gb" not in row
    run_memory.give_back()  # returns the free heap where glibc has malloc_trim, else does nothing


def test_the_heap_threshold_is_fixed_once_unless_the_user_set_it(monkeypatch):
    """bound_heap asks glibc for a fixed mmap threshold (mallopt M_MMAP_THRESHOLD = -3), once a
    process; a MALLOC_MMAP_THRESHOLD_ in the environment is the user's and is left alone."""
    calls = []
    fake = SimpleNamespace(mallopt=lambda param, value: calls.append((param, value)) or 1)
    monkeypatch.setattr(run_memory, "_libc", lambda: fake)
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    run_memory.bound_heap.cache_clear()
    try:
        assert run_memory.bound_heap() is True and run_memory.bound_heap() is True
        assert calls == [(-3, 4 << 20)]
        run_memory.bound_heap.cache_clear()
        monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
        assert run_memory.bound_heap() is False and calls == [(-3, 4 << 20)]
        run_memory.bound_heap.cache_clear()
        monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_")
        monkeypatch.setattr(run_memory, "_libc", lambda: None)  # no glibc: nothing to set
        assert run_memory.bound_heap() is False
    finally:
        run_memory.bound_heap.cache_clear()


def test_last_position_index_gives_the_logits_of_logits_to_keep_1(tiny_model_dir):
    from rolecall.policies.model import last_position, load_base

    model, tok = load_base(str(tiny_model_dir))
    ids = torch.randint(5, 90, (3, 11))
    attn = torch.ones_like(ids)
    attn[0, :4] = 0  # left padding
    with torch.no_grad():
        one = model(input_ids=ids, attention_mask=attn, logits_to_keep=1).logits
        index = model(input_ids=ids, attention_mask=attn, logits_to_keep=last_position(11, ids.device)).logits
    assert index.shape == one.shape == (3, 1, model.config.vocab_size)
    torch.testing.assert_close(index, one)


def test_statistics_over_the_column_blocks_equal_those_of_the_joined_logits(tiny_model_dir):
    from rolecall.algo.batch import Row, collate
    from rolecall.policies.model import attach_adapters, load_base

    model, tok = load_base(str(tiny_model_dir))
    model = attach_adapters(model, ["p"], r=4, alpha=8, dropout=0.0, target_modules="all-linear")
    g = torch.Generator().manual_seed(3)
    prompt = torch.randint(5, 90, (7,), generator=g).tolist()
    rows = [Row(prompt + torch.randint(5, 90, (n,), generator=g).tolist(), 7, [-1.0] * n, 0.5, "r", "r")
            for n in (4, 2, 5)]
    b = collate(rows, tok.pad_token_id)
    parts = completion_logit_parts(model, b)
    assert [p.shape[1] for p in parts] == [1, b["completion_ids"].shape[1] - 1]
    stats = over_parts(parts, b["targets"], lambda z, t: token_logprobs_and_entropy(z, t, 0.7))
    joined = token_logprobs_and_entropy(completion_logits(model, b), b["targets"], 0.7)
    for a, c in zip(stats, joined):
        torch.testing.assert_close(a, c)
    (stats[0] * b["mask"]).sum().backward()  # the blocks carry the gradient to the adapter
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for n, p in model.named_parameters() if "lora_" in n)


def test_a_run_says_its_micro_batch_budget_and_logs_its_memory(tiny_model_dir, tmp_path):
    from typer.testing import CliRunner

    from rolecall.cli import app

    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["train", f"model.path={tiny_model_dir}", "rollout.problems_per_step=2",
                                   "rollout.group_size=2", "task.n_val=2", "rollout.max_new_tokens=4", "--steps", "2",
                                   "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "algo.micro_batch_tokens auto: 16,384 tokens" in res.output  # the tiny model fits the cap
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert not any("event" in r for r in rows)  # said on the console, carried by the step rows
    steps = [r for r in rows if "reward/mean" in r]
    assert len(steps) == 2 and all(r["mem/peak_gb"] > 0 and "mem/available_gb" in r for r in steps)
    assert all(r["mem/micro_batch_tokens"] == 16384 for r in steps)
