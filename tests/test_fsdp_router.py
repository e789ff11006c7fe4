"""The LoRA router under FSDP2: two gloo processes shard the tiny model per decoder layer and
at the root; training with rows on two adapters and the bare base gets every LoRA gradient one
process gets, and the one-adapter and generation modes the same logits. Generation's mode
reads the adapter weights inside each layer's forward, where FSDP has gathered the shards
(read at the block's entry they are shards, and the forward fails)."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from fsdp_ranks import fsdp_report  # noqa: E402


def test_router_modes_match_one_process_under_fsdp2(tiny_model_dir):
    ref, report = fsdp_report(str(tiny_model_dir))
    assert report["wrapped"] and "errors" not in report and "error" not in report, report
    assert report["mixed_training"]["lora_grads"] == len(ref["mixed_grads"]) > 0
    assert report["mixed_training"]["max_rel_diff"] < 1e-5, report
    for mode in ("policy", "rows"):
        assert report[mode]["max_abs_diff"] < 1e-5, (mode, report)
