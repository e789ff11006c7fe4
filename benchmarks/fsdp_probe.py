"""Does the LoRA router survive FSDP wrapping? Two gloo processes on CPU shard the embedded
model with FSDP2 (`torch.distributed.fsdp.fully_shard`, per decoder layer and at the root) and
run the router's three modes against the same model unsharded in one process:

- training, `router.mixed([a, b])`: one forward + backward with rows on two adapters and the
  bare base; every LoRA gradient is compared (FSDP2 reduce-scatters them: each rank holds a
  shard of the summed gradient, gathered here with `full_tensor()`).
- one adapter, `router.policy(a)`: logits of a forward.
- generation, `router.rows([...])` (weights read once on entering the block): logits.

    python benchmarks/fsdp_probe.py      # ~1 min on 2 cores; writes benchmarks/results/fsdp_probe.json

Each rank feeds the same batch: in FSDP every rank holds the whole batch it computes on, so
with identical inputs the summed gradient is 2x one process's; the probe compares it to that.
"""
from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
RESULT = Path(__file__).resolve().parent / "results" / "fsdp_probe.json"
ADAPTERS = ("a", "b")


def build():
    import torch

    from rolecall.policies.model import attach_adapters, embedded_dir, load_model

    torch.manual_seed(0)
    model = load_model(str(embedded_dir()))
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
    ids = torch.randint(5, 60, (6, 24), generator=g)
    index = torch.tensor([0, 1, -1, 1, 0, 0])  # adapter a, b, bare base, ...
    return ids, index


def run_modes(model) -> dict:
    """The three router modes on `model`; {mode: tensor or gradients}."""
    import torch

    from rolecall.policies.lora_router import router_for

    router = router_for(model)
    ids, index = batch()
    out = {}
    with router.mixed(ADAPTERS) as set_rows:  # training: rows on two adapters and the base
        set_rows(index)
        logits = model(input_ids=ids).logits
        logits.float().logsumexp(-1).mean().backward()
    grads = {}
    for n, p in model.named_parameters():
        if p.grad is not None:
            g = p.grad
            grads[n] = (g.full_tensor() if hasattr(g, "full_tensor") else g).detach().clone()
    out["mixed_grads"] = grads
    with torch.no_grad():
        with router.policy("a"):
            out["policy_logits"] = model(input_ids=ids).logits.detach().clone()
        with router.rows([ADAPTERS[i] if i >= 0 else "base" for i in index.tolist()]):
            out["rows_logits"] = model(input_ids=ids).logits.detach().clone()
    return out


def rank_main(rank: int, world: int, init: str, out: str) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    result: dict = {}
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        model = build()
        mesh = init_device_mesh("cpu", (world,))
        for layer in model.base_model.model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        result["wrapped"] = True
        for mode in ("mixed_grads", "policy_logits", "rows_logits"):
            result[mode] = None
        try:
            got = run_modes(model)
            result.update(got)
        except Exception as e:  # noqa: BLE001 - the probe reports what fails
            result["error"] = f"{type(e).__name__}: {e}"
            result["trace"] = traceback.format_exc()[-1500:]
    except Exception as e:  # noqa: BLE001
        result = {"wrapped": False, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-1500:]}
    finally:
        dist.destroy_process_group()
    if rank == 0:
        import torch

        torch.save(result, out)


def compare(ref: dict, got: dict) -> dict:
    import torch

    report: dict = {"wrapped": got.get("wrapped", False)}
    if "error" in got:
        report["error"] = got["error"]
        report["trace"] = got.get("trace", "")
    if got.get("mixed_grads"):
        rel = {}
        for n, g in ref["mixed_grads"].items():
            h = got["mixed_grads"].get(n)
            if h is None:
                rel[n] = float("inf")
                continue
            # every rank fed the same batch: FSDP's reduce-scatter sums 2 equal gradients
            rel[n] = float((h / 2 - g).norm() / g.norm().clamp(min=1e-12))
        report["mixed_training"] = {"lora_grads": len(rel), "max_rel_diff": max(rel.values()),
                                    "ok": max(rel.values()) < 1e-4}
    for mode in ("policy_logits", "rows_logits"):
        if got.get(mode) is not None:
            d = float((got[mode] - ref[mode]).abs().max())
            report[mode.replace("_logits", "")] = {"max_abs_diff": d, "ok": d < 1e-4}
    return report


def main() -> int:
    import torch
    import torch.multiprocessing as mp

    torch.set_num_threads(2)
    t0 = time.time()
    ref = run_modes(build())
    tmp = tempfile.mkdtemp(prefix="rc-fsdp-")
    mp.spawn(rank_main, args=(2, f"{tmp}/init", f"{tmp}/fsdp.pt"), nprocs=2, join=True)
    got = torch.load(f"{tmp}/fsdp.pt", weights_only=False)
    report = {"date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
              "torch": torch.__version__, "setup": "embedded model, 2 LoRA adapters (r 8, all linear layers), "
              "FSDP2 fully_shard per decoder layer + root, 2 gloo processes", **compare(ref, got),
              "seconds": round(time.time() - t0, 1)}
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "trace"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
