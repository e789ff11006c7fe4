"""`model.dtype: auto`: bfloat16 on a CPU that computes it natively and measures it faster, float32
elsewhere; the run says which and why. Base weights take it; LoRA weights stay float32."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from rolecall.policies import precision
from rolecall.policies.precision import MIN_SPEEDUP, auto_dtype, cpu_flags
from rolecall.schema import Config

CPU = torch.device("cpu")


def test_cpu_flags_are_read_from_cpuinfo():
    text = "processor\t: 0\nmodel name\t: X\nflags\t\t: fpu sse avx512f avx512_bf16 amx_tile\n"
    assert {"avx512_bf16", "amx_tile", "fpu"} <= cpu_flags(text)
    assert cpu_flags("processor: 0\n") == set()


@pytest.mark.parametrize("flags", [{"avx512_bf16", "avx512f"}, {"amx_bf16", "amx_tile"}])
def test_native_bf16_that_measures_faster_is_chosen(flags):
    chosen = auto_dtype(CPU, flags=flags, probe=lambda: 2.9)
    assert chosen.dtype == torch.bfloat16
    assert sorted(flags & {"avx512_bf16", "amx_bf16"})[0] in chosen.why and "2.90x" in chosen.why


def test_without_native_bf16_float32_is_kept_and_nothing_is_measured():
    def probe():
        raise AssertionError("no probe without the flags")

    chosen = auto_dtype(CPU, flags={"avx2", "avx512f"}, probe=probe)
    assert chosen.dtype == torch.float32 and "no native bfloat16" in chosen.why


def test_native_bf16_that_does_not_measure_faster_keeps_float32():
    chosen = auto_dtype(CPU, flags={"avx512_bf16"}, probe=lambda: MIN_SPEEDUP - 0.1)
    assert chosen.dtype == torch.float32 and "measured only" in chosen.why


def test_auto_is_the_default_and_is_measured_on_the_model_being_loaded(tiny_model_dir, monkeypatch):
    assert Config().model.dtype == "auto"
    chosen = auto_dtype(CPU, tiny_model_dir, flags={"avx512_bf16"}, probe=lambda: 1.0)
    assert chosen.dtype == torch.float32 and "this model's forward and backward" in chosen.why
    speedup = precision.measure_model_speedup(tiny_model_dir, repeats=1)  # runs anywhere; emulated bf16 is fine
    assert speedup > 0 and speedup == speedup


def test_each_model_is_probed_once_and_cached_apart(tiny_model_dir, tmp_path, monkeypatch):
    other = shutil.copytree(tiny_model_dir, tmp_path / "other")
    cfg = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**cfg, "rms_norm_eps": 1e-5}))  # another model, same size
    monkeypatch.setenv("ROLECALL_CACHE", str(tmp_path / "cache"))
    calls = []
    monkeypatch.setattr(precision, "measure_model_speedup", lambda d: calls.append(str(d)) or 1.5)
    precision.cached_probe.cache_clear()
    try:
        assert precision.cached_probe(str(tiny_model_dir)) == 1.5 and precision.cached_probe(str(other)) == 1.5
        precision.cached_probe.cache_clear()  # a new process: read from the file, not measured again
        assert precision.cached_probe(str(tiny_model_dir)) == 1.5
    finally:
        precision.cached_probe.cache_clear()
    assert calls == [str(tiny_model_dir), str(other)]


def test_a_bf16_base_keeps_float32_adapters_and_trains(tiny_model_dir, tmp_path):
    from rolecall.api import train_run
    from rolecall.config import load_config
    from rolecall.rundir.checkpoint import latest_checkpoint
    from safetensors.torch import load_file

    cfg = load_config(None, [f"model.path={tiny_model_dir}", "model.dtype=bfloat16", "rollout.problems_per_step=2",
                             "rollout.group_size=2", "rollout.max_new_tokens=4", "task.n_val=4", "train.threads=1",
                             "train.steps=1"])
    run = train_run(cfg, tmp_path / "run", notify=lambda _: None)
    weights = load_file(str(latest_checkpoint(run.path) / "generator" / "adapter_model.safetensors"))
    assert weights and all(t.dtype == torch.float32 for t in weights.values())
    step = next(r for r in run.metrics if r.get("step") == 1 and "reward/mean" in r)
    assert step.get("nonfinite/loss", 0) == 0 and step.get("nonfinite/grad", 0) == 0


def test_auto_is_said_in_the_run(tiny_model_dir, tmp_path, monkeypatch):
    from rolecall.api import train_run
    from rolecall.config import load_config
    from rolecall.policies import precision

    monkeypatch.setattr(precision, "cpu_flags", lambda: {"avx2"})
    said: list[str] = []
    cfg = load_config(None, [f"model.path={tiny_model_dir}", "model.dtype=auto", "rollout.problems_per_step=2",
                             "rollout.group_size=2", "rollout.max_new_tokens=4", "task.n_val=4", "train.threads=1",
                             "train.steps=1"])
    run = train_run(cfg, tmp_path / "run", notify=said.append)
    assert any(s.startswith("model.dtype auto: float32: this CPU has no native bfloat16") for s in said), said
    sitting = json.loads((run.path / "sittings.jsonl").read_text().splitlines()[0])
    assert sitting["precision"][str(tiny_model_dir)]["dtype"] == "float32"
    assert "no native bfloat16" in sitting["precision"][str(tiny_model_dir)]["why"]
    rows = [json.loads(x) for x in (run.path / "metrics.jsonl").read_text().splitlines()]
    assert not any("event" in r for r in rows)  # the metric rows stay steps and validations


def test_a_bf16_base_runs_its_float32_adapters_in_bf16_and_sees_every_update(tiny_model_dir):
    """Sampling reuses one bf16 cast of an adapter's weights; an in-place update (the optimizer's)
    must invalidate it, and with gradients the float32 weights get theirs through the cast."""
    from rolecall.policies.lora_router import router_for
    from rolecall.policies.model import attach_adapters, load_model

    model = attach_adapters(load_model(str(tiny_model_dir), "bfloat16"), ["p"], r=4, alpha=8, dropout=0.0,
                            target_modules="all-linear")
    lora = [p for n, p in model.named_parameters() if "lora_" in n]
    assert lora and all(p.dtype == torch.float32 for p in lora)
    with torch.no_grad():
        for p in lora:
            p.normal_(0, 0.3)
    ids = torch.tensor([[5, 6, 7, 8]])
    router = router_for(model)
    with router.policy("p"), torch.no_grad():
        first = model(input_ids=ids).logits
        again = model(input_ids=ids).logits
        for p in lora:
            p.add_(0.5)  # as an optimizer step does: in place
        moved = model(input_ids=ids).logits
    assert first.dtype == torch.bfloat16 and torch.equal(first, again)
    assert not torch.equal(first, moved), "a stale bf16 copy of the adapter was used after an update"
    with router.policy("p"):
        model(input_ids=ids).logits.float().sum().backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in lora)


def test_the_real_optimizer_step_reaches_the_bf16_sampler(tiny_model_dir):
    """The fused AdamW kernel writes weights in place without moving their `_version`, on which the
    bf16 cast of an adapter is cached: the optimizer step the trainer really takes (`_apply`) must
    still reach the no-grad forward that sampling runs, exactly as a fresh cast would."""
    from rolecall.algo.optim import build_optimizers
    from rolecall.algo.update import _apply
    from rolecall.config import OptimCfg
    from rolecall.policies.lora_router import router_for
    from rolecall.policies.model import attach_adapters, load_model

    model = attach_adapters(load_model(str(tiny_model_dir), "bfloat16"), ["p"], r=4, alpha=8, dropout=0.0,
                            target_modules="all-linear")
    popt = build_optimizers(model, ("p",), OptimCfg(lr=0.05, warmup_steps=0))["p"]
    assert any(g.get("fused") for g in popt.optimizer.param_groups)  # the kernel the runs use
    ids = torch.tensor([[5, 6, 7, 8]])
    router = router_for(model)
    with router.policy("p"):
        with torch.no_grad():
            before = model(input_ids=ids).logits  # caches the bf16 cast of the untrained adapter
        model(input_ids=ids).logits.float().pow(2).mean().backward()
        assert _apply(popt, 0.5)
        with torch.no_grad():
            after = model(input_ids=ids).logits
            router.__dict__.pop("_half", None)  # a fresh cast of the stepped weights
            fresh = model(input_ids=ids).logits
    assert torch.equal(after, fresh), "sampling used a stale bf16 copy of the adapter after the optimizer step"
    assert not torch.equal(before, after)


def test_a_bf16_sampling_block_of_two_adapters_casts_their_weights_once(tiny_model_dir, monkeypatch):
    """A generation block that mixes adapters row by row reads each layer's concatenated
    float32 adapters once; on a bf16 base it casts them then, not at every decode step, and
    each row still gets exactly what its own adapter alone would give it."""
    from rolecall.policies.lora_router import LoraRouter, router_for
    from rolecall.policies.model import attach_adapters, load_model

    model = attach_adapters(load_model(str(tiny_model_dir), "bfloat16"), ["p", "q"], r=4, alpha=8, dropout=0.0,
                            target_modules="all-linear")
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_" in n:
                p.normal_(0, 0.3)
    ids = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])
    router = router_for(model)
    with torch.no_grad():
        alone = []
        for row, name in enumerate(["p", "q"]):
            with router.policy(name):
                alone.append(model(input_ids=ids[row:row + 1]).logits)
        casts = []
        monkeypatch.setattr(LoraRouter, "half", lambda self, *a, _f=LoraRouter.half: casts.append(1) or _f(self, *a))
        with router.rows(["p", "q"]):
            mixed = [model(input_ids=ids).logits for _ in range(3)]  # three "decode steps"
    assert casts == [], "the concatenated adapters were cast to bf16 at every call"
    assert mixed[0].dtype == torch.bfloat16 and torch.equal(mixed[0], mixed[2])
    torch.testing.assert_close(mixed[0], torch.cat(alone), atol=2e-2, rtol=2e-2)
