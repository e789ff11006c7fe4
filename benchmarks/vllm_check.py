"""The vLLM engine end to end on the embedded model (run by benchmarks/vllm_cpu.sh in its own venv).

1. Greedy tokens and log-probs: vLLM against rolecall's HF engine, bare model.
2. Temperature: the log-prob vLLM reports for each sampled token at T = 0.7 against the HF
   model's log-softmax(logits / T) at that token (teacher-forced).
3. Adapters: two versions of an adapter published one after the other; each generation must
   match the HF engine under the weights of the version just published (no stale adapter).
4. `rolecall train rollout.engine=vllm` for 2 steps.
Writes benchmarks/results/vllm_cpu.json; exits 1 if a check fails.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.provenance import write_result  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
RESULT = HERE / "results" / "vllm_cpu.json"
PROMPTS = ["12+30", "Solve. Put the final answer in \\boxed{}.\n47-19", "Check the solution. 3+4 \\boxed{7}"]


def main() -> int:
    import torch
    import vllm

    import rolecall
    from rolecall.engines.base import GenRequest
    from rolecall.engines.hf import HFEngine
    from rolecall.engines.vllm import VLLMEngine
    from rolecall.policies.model import attach_adapters, embedded_dir, load_model, load_tokenizer

    checks: dict[str, object] = {"vllm": vllm.__version__, "torch": torch.__version__}
    tok = load_tokenizer("embedded")
    hf_model = attach_adapters(load_model("embedded", "float32", "cpu"), ["gen"], r=16, alpha=32, dropout=0.0,
                               target_modules="all-linear")
    hf = HFEngine(hf_model, tok)
    t0 = time.time()
    vl = VLLMEngine(embedded_dir(), tok, adapters=("gen",), max_lora_rank=16, memory_fraction=0.1, dtype="float32")
    checks["vllm_start_s"] = round(time.time() - t0, 1)
    reqs = [GenRequest([{"role": "user", "content": p}], "base", 12) for p in PROMPTS]

    # 1. greedy, bare model
    a, b = hf.generate(reqs, temperature=0.0), vl.generate(reqs, temperature=0.0)
    same = [x.completion_ids == y.completion_ids for x, y in zip(a, b)]
    checks["greedy_same_tokens"] = same
    ok = all(same)

    # 2. temperature applied to the reported log-probs
    seeded = [GenRequest(r.messages, "base", 12, seed=7 + i) for i, r in enumerate(reqs)]
    outs = vl.generate(seeded, temperature=0.7)
    worst = 0.0
    for r, o in zip(seeded, outs):
        ids = torch.tensor([o.prompt_ids + o.completion_ids])
        with torch.no_grad(), hf_model.disable_adapter():
            logits = hf_model(input_ids=ids).logits[0, len(o.prompt_ids) - 1:-1].float()
        want = torch.log_softmax(logits / 0.7, -1).gather(1, torch.tensor(o.completion_ids).unsqueeze(1)).squeeze(1)
        worst = max(worst, float((want - torch.tensor(o.logprobs)).abs().max()))
    checks["temperature_logprob_max_abs_diff"] = round(worst, 6)
    ok &= worst < 1e-3
    again = vl.generate(seeded, temperature=0.7)
    checks["seeded_repeatable"] = [x.completion_ids for x in outs] == [x.completion_ids for x in again]
    ok &= checks["seeded_repeatable"]

    # 3. two adapter versions, published in turn
    lora = [(n, p) for n, p in hf_model.named_parameters() if ".gen." in n and "lora_B" in n]
    results = []
    for version in range(2):
        torch.manual_seed(100 + version)
        with torch.no_grad():
            for _, p in lora:
                p.copy_(torch.randn_like(p) * 0.5)  # strong enough to change the greedy answers
        vl.publish({"gen": hf_model})  # version 0, then 1
        on_a = [GenRequest(r.messages, "gen", 12) for r in reqs]
        x, y = hf.generate(on_a, temperature=0.0), vl.generate(on_a, temperature=0.0)
        results.append({"version": version, "same_as_hf": [p.completion_ids == q.completion_ids for p, q in zip(x, y)],
                        "texts": [q.completion_text for q in y]})
    checks["adapter_versions"] = results
    ok &= all(all(r["same_as_hf"]) for r in results)
    checks["versions_differ"] = results[0]["texts"] != results[1]["texts"]
    ok &= checks["versions_differ"]
    del vl

    # 4. training through the vLLM engine
    out = Path(tempfile.mkdtemp(prefix="rc-vllm-run-"))
    t0 = time.time()
    run = rolecall.train_run({"rollout": {"engine": "vllm", "vllm_memory_fraction": 0.1, "problems_per_step": 4,
                                          "group_size": 4}, "task": {"n_val": 20},
                              "train": {"steps": 2, "val_every": 2}}, out / "run", notify=print)
    steps = [r["step"] for r in run.metrics if "reward/mean" in r]
    checks["train_steps"] = steps
    checks["train_val_accuracy"] = [r["val/accuracy"] for r in run.metrics if "val/accuracy" in r]
    checks["train_wall_s"] = round(time.time() - t0, 1)
    ok &= steps == [1, 2]
    checks["passed"] = bool(ok)
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    write_result(RESULT, checks)
    print(json.dumps(checks, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
