"""Local Hugging Face engine: one `generate` per wave, rows with different LoRA adapters.

Adapters are switched by the model's LoRA router (`policies/lora_router.py`): a chunk with
one policy runs that adapter alone; a mixed chunk runs every LoRA layer once for all rows
with a row mask; where the router cannot represent the adapters (DoRA, LoRA bias, ...) a
mixed chunk is split into one batch per policy. PEFT's own per-row `adapter_names` is not
used: it is no faster than one batch per policy and refuses DoRA. Sampling log-probs
are recorded step by step by a logits processor that also applies the temperature, so
they are exactly the distribution sampled from, with O(batch x vocab) extra memory.
"""
from __future__ import annotations

from contextlib import nullcontext

import torch

from rolecall.engines.base import GenOutput, GenRequest
from rolecall.policies.lora_router import router_for
from rolecall.policies.model import set_training


class _TemperatureAndLogprobs:
    """Scales logits by 1/T and keeps log-softmax of the last step to read the sampled token's log-prob."""

    def __init__(self, temperature: float, prompt_len: int) -> None:
        self.t = temperature if temperature > 0 else 1.0
        self.prompt_len = prompt_len
        self.prev: torch.Tensor | None = None
        self.logprobs_B_T: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self.collect(input_ids)
        scores = scores / self.t
        self.prev = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def collect(self, input_ids: torch.Tensor) -> None:
        if self.prev is not None and input_ids.shape[1] > self.prompt_len:
            tok = input_ids[:, -1:]
            self.logprobs_B_T.append(self.prev.gather(1, tok).squeeze(1))
            self.prev = None


def stop_token_ids(model, tokenizer) -> list[int]:
    """End-of-turn ids: the tokenizer's eos plus any the checkpoint's generation config lists
    (Qwen3 ships both `<|im_end|>` and `<|endoftext|>`)."""
    ids = [tokenizer.eos_token_id]
    extra = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids += extra if isinstance(extra, list) else [extra]
    return list(dict.fromkeys(i for i in ids if i is not None))


class HFEngine:
    def __init__(self, model, tokenizer, *, max_batch: int = 256, enable_thinking: bool = False,
                 max_prompt_tokens: int | None = None) -> None:
        self.model, self.tok = model, tokenizer
        self.max_batch = max_batch
        self.max_prompt_tokens = max_prompt_tokens
        self.enable_thinking = enable_thinking
        self.stop_ids = stop_token_ids(model, tokenizer)

    def render(self, messages: list[dict[str, str]]) -> str:
        return self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                            enable_thinking=self.enable_thinking)

    def generate(self, requests: list[GenRequest], *, temperature: float) -> list[GenOutput]:
        texts = [self.render(r.messages) for r in requests]
        ids_B = [self.tok(t, add_special_tokens=False)["input_ids"] for t in texts]
        # A prompt over budget is not generated (its history is already too long to be
        # useful); it comes back empty and truncated, and the rest of the wave proceeds.
        fits = [self.max_prompt_tokens is None or len(ids) <= self.max_prompt_tokens for ids in ids_B]
        todo = [i for i, ok in enumerate(fits) if ok]
        done: dict[int, GenOutput] = {
            i: GenOutput(prompt_text=texts[i], prompt_ids=ids_B[i], completion_ids=[], completion_text="",
                         logprobs=[], finish_reason="length") for i, ok in enumerate(fits) if not ok}
        for chunk in self._chunks(requests, todo):
            outs = self._generate_chunk([requests[i] for i in chunk], [texts[i] for i in chunk],
                                        [ids_B[i] for i in chunk], temperature)
            done.update(zip(chunk, outs))
        return [done[i] for i in range(len(requests))]

    @torch.no_grad()
    def _generate_chunk(self, reqs: list[GenRequest], texts: list[str], ids_B: list[list[int]],
                        temperature: float) -> list[GenOutput]:
        from transformers import GenerationConfig, LogitsProcessorList

        width = max(map(len, ids_B))
        pad = self.tok.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(x)) + x for x in ids_B])
        attn = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids_B])
        budget = max(r.max_new_tokens for r in reqs)
        rec = _TemperatureAndLogprobs(temperature, width)
        cfg = GenerationConfig(max_new_tokens=budget, do_sample=temperature > 0, temperature=1.0,
                               top_k=None, top_p=1.0, pad_token_id=pad, eos_token_id=self.stop_ids)
        was_training = self.model.training
        set_training(self.model, False)  # no dropout while sampling
        try:
            input_ids, attn = input_ids.to(self.model.device), attn.to(self.model.device)
            policies = [r.policy for r in reqs]
            cache = self._shared_prefill(input_ids, attn, policies)
            with self._policies(policies):
                seq = self.model.generate(input_ids=input_ids, attention_mask=attn, generation_config=cfg,
                                          logits_processor=LogitsProcessorList([rec]),
                                          **({"past_key_values": cache} if cache is not None else {}))
        finally:
            set_training(self.model, was_training)
        rec.collect(seq)
        gen_B_T = seq[:, width:].tolist()
        lp_B_T = torch.stack(rec.logprobs_B_T, 1).tolist() if rec.logprobs_B_T else [[] for _ in reqs]
        return [self._finish(text, ids, gen, lp, r.max_new_tokens)
                for text, ids, gen, lp, r in zip(texts, ids_B, gen_B_T, lp_B_T, reqs)]

    def _shared_prefill(self, input_ids_B: torch.Tensor, attn_B: torch.Tensor, policies_B: list[str]):
        """The KV cache of every row's prompt but its last token, computed once per distinct
        (prompt, policy) and shared by the rows that repeat it; None when no row repeats.

        A wave holds the G samples of each problem with identical prompts: their prefill is
        the same work G times over. `generate` then runs only the last prompt token per row.
        """
        keys = [(tuple(row), p) for row, p in zip(input_ids_B.tolist(), policies_B)]
        first: dict[tuple, int] = {}
        for i, k in enumerate(keys):
            first.setdefault(k, i)
        if len(first) == len(keys) or input_ids_B.shape[1] < 2:
            return None
        from transformers import DynamicCache

        rep_U = list(first.values())
        slot = {k: u for u, k in enumerate(first)}
        ids_U, attn_U = input_ids_B[rep_U, :-1], attn_B[rep_U, :-1]
        cache = DynamicCache()
        with self._policies([policies_B[i] for i in rep_U]):
            self.model(input_ids=ids_U, attention_mask=attn_U, position_ids=(attn_U.cumsum(-1) - 1).clamp(min=0),
                       past_key_values=cache, use_cache=True, logits_to_keep=1)
        cache.reorder_cache(torch.tensor([slot[k] for k in keys], device=input_ids_B.device))
        return cache

    def _policies(self, row_policies: list[str]):
        """The context that runs each row on its policy (the chunk is one the model can mix)."""
        if not hasattr(self.model, "peft_config"):
            return nullcontext()
        router = router_for(self.model)
        if len(set(row_policies)) == 1:
            # Most waves (all generators, all aggregators, everything under SP): one adapter,
            # no row mask.
            return router.policy(row_policies[0])
        return router.rows(row_policies)

    def _chunks(self, requests: list[GenRequest], todo: list[int]) -> list[list[int]]:
        """Row indices per generate call: at most max_batch rows, one policy per call unless
        the model can mix these policies in one batch."""
        policies = [requests[i].policy for i in todo]
        mixable = not hasattr(self.model, "peft_config") or len(set(policies)) <= 1 \
            or router_for(self.model).plain(policies)
        groups = [todo] if mixable else [[i for i in todo if requests[i].policy == p] for p in dict.fromkeys(policies)]
        return [g[lo:lo + self.max_batch] for g in groups for lo in range(0, len(g), self.max_batch)]

    def _finish(self, prompt_text: str, prompt_ids: list[int], gen: list[int], lp: list[float],
                budget: int) -> GenOutput:
        end = next((i + 1 for i, t in enumerate(gen[:budget]) if t in self.stop_ids), None)
        cut = end if end is not None else min(budget, len(gen))
        comp = gen[:cut]
        return GenOutput(prompt_text=prompt_text, prompt_ids=prompt_ids, completion_ids=comp,
                         completion_text=self.tok.decode(comp, skip_special_tokens=True),
                         logprobs=lp[:cut], finish_reason="stop" if end is not None else "length")
