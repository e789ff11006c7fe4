"""The LoRA router's three modes on the embedded model sharded with FSDP2 over two gloo processes
(`torch.distributed.fsdp.fully_shard`, per decoder layer and at the root), against the same model
unsharded in one process (tests/test_fsdp_router.py):

- training, `router.mixed([a, b])`: one forward + backward with rows on two adapters and the
  bare base; every LoRA gradient is compared (FSDP2 reduce-scatters them: each rank holds a
  shard of the summed gradient, gathered here with `full_tensor()`).
- one adapter, `router.policy(a)`: logits of a forward.
- generation, `router.rows([...])` (weights read once on entering the block): logits.

Each rank feeds the same batch, and FSDP averages the ranks' gradients, so every LoRA gradient
should equal one process's. A module of its own so that `mp.spawn` can import the rank function.
"""
from __future__ import annotations

import tempfile
import traceback

ADAPTERS = ("alpha", "beta")


def build(model_dir: str | None = None):
    import torch

    from rolecall.policies.model import attach_adapters, embedded_dir, load_model

    torch.manual_seed(0)
    model = load_model(model_dir or str(embedded_dir()))
    model = attach_adapters(model, list(ADAPTERS), r=8, alpha=16, dropout=0.0, target_modules="all-linear")
    with torch.no_grad():  # B starts at zero in PEFT: give every adapter a non-trivial update
        for n, p in model.named_parameters():
            if "lora_" in n:
                p.copy_(torch.randn_like(p) * 0.05)
    for n, p in model.named_parameters():
        p.requires_grad_("lora_" in n)
    return model


def batch():
    import torch

    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 40, (6, 24), generator=g)
    index = torch.tensor([0, 1, -1, 1, 0, 0])  # adapter a, b, bare base, ...
    return ids, index


def run_modes(model) -> dict:
    """The three router modes on `model`; {mode: gradients or logits, or the error it raised}."""
    import torch

    from rolecall.policies.lora_router import router_for

    router = router_for(model)
    ids, index = batch()
    out: dict = {}

    def mixed():  # training: rows on two adapters and the base, forward and backward
        with router.mixed(ADAPTERS) as set_rows:
            set_rows(index)
            model(input_ids=ids).logits.float().logsumexp(-1).mean().backward()
        grads = {}
        for n, p in model.named_parameters():
            if p.grad is not None:
                g = p.grad
                grads[n] = (g.full_tensor() if hasattr(g, "full_tensor") else g).detach().clone()
        return grads

    def policy():
        with torch.no_grad(), router.policy(ADAPTERS[0]):
            return model(input_ids=ids).logits.detach().clone()

    def rows():  # generation's mode: weights read once per block
        with torch.no_grad(), router.rows([ADAPTERS[i] if i >= 0 else "base" for i in index.tolist()]):
            return model(input_ids=ids).logits.detach().clone()

    for name, fn in (("mixed_grads", mixed), ("policy_logits", policy), ("rows_logits", rows)):
        try:
            out[name] = fn()
        except Exception as e:  # noqa: BLE001 - the probe reports what fails
            out[name] = None
            out.setdefault("errors", {})[name] = f"{type(e).__name__}: {str(e)[:300]}"
    return out


def rank_main(rank: int, world: int, init: str, out: str, model_dir: str | None = None) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    result: dict = {}
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        model = build(model_dir)
        mesh = init_device_mesh("cpu", (world,))
        for layer in model.base_model.model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        result["wrapped"] = True
        result.update(run_modes(model))
    except Exception as e:  # noqa: BLE001
        result = {"wrapped": False, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-1500:]}
    finally:
        dist.destroy_process_group()
    if rank == 0:
        import torch

        torch.save(result, out)


def compare(ref: dict, got: dict) -> dict:
    report: dict = {"wrapped": got.get("wrapped", False)}
    for key in ("error", "trace", "errors"):
        if key in got:
            report[key] = got[key]
    if got.get("mixed_grads"):
        rel = {}
        for n, g in ref["mixed_grads"].items():
            h = got["mixed_grads"].get(n)
            if h is None:
                rel[n] = float("inf")
                continue
            # every rank fed the same batch, and FSDP averages the ranks' gradients
            rel[n] = float((h - g).norm() / g.norm().clamp(min=1e-12))
        report["mixed_training"] = {"lora_grads": len(rel), "max_rel_diff": max(rel.values()),
                                    "ok": max(rel.values()) < 1e-4}
    for mode in ("policy_logits", "rows_logits"):
        if got.get(mode) is not None:
            d = float((got[mode] - ref[mode]).abs().max())
            report[mode.replace("_logits", "")] = {"max_abs_diff": d, "ok": d < 1e-4}
    return report


def fsdp_report(model_dir: str | None = None) -> tuple[dict, dict]:
    """(the unsharded model's results, the comparison with 2 FSDP2-sharded gloo ranks)."""
    import torch
    import torch.multiprocessing as mp

    ref = run_modes(build(model_dir))
    tmp = tempfile.mkdtemp(prefix="rc-fsdp-")
    mp.spawn(rank_main, args=(2, f"{tmp}/init", f"{tmp}/fsdp.pt", model_dir), nprocs=2, join=True)
    got = torch.load(f"{tmp}/fsdp.pt", weights_only=False)
    return ref, compare(ref, got)
