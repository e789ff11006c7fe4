"""Local Hugging Face engine: one batch per wave, rows with different LoRA adapters.

Adapters are switched by the model's LoRA router (`policies/lora_router.py`): a chunk with
one policy runs that adapter alone; a mixed chunk runs every LoRA layer once for all rows
with a row mask; where the router cannot represent the adapters (DoRA, LoRA bias, ...) a
mixed chunk is split into one batch per policy. PEFT's own per-row `adapter_names` is not
used: it is no faster than one batch per policy and refuses DoRA.

Each distinct (prompt, policy) is prefilled once, then a plain decode loop samples from HF
`generate`'s distribution (greedy decoding tested token for token against it) without its
per-step machinery, which cost ~30 % of a decode step on the embedded model. The log-prob of each sampled
token is read from the very distribution it was drawn from.
"""
from __future__ import annotations

import json
from contextlib import nullcontext

import torch

from rolecall.engines.base import DEFAULT_MAX_BATCH, GenOutput, GenRequest
from rolecall.engines.decode_kv import buffer_cache, cache_bytes_per_position, folded_decode, prefill_rows
from rolecall.policies.lora_router import router_for
from rolecall.policies.model import last_position, set_training


def stop_token_ids(model, tokenizer) -> list[int]:
    """End-of-turn ids: the tokenizer's eos plus any the checkpoint's generation config lists
    (Qwen3 ships both `<|im_end|>` and `<|endoftext|>`)."""
    ids = [tokenizer.eos_token_id]
    extra = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids += extra if isinstance(extra, list) else [extra]
    return list(dict.fromkeys(i for i in ids if i is not None))


CPU_CACHE_BYTES = 512 << 20  # key/value cache of one generate call on a CPU (see `HFEngine._fit`)
CPU_PREFILL_TOKENS = 4096  # prompt tokens per prefill forward on a CPU (see `HFEngine._prefill`)


class HFEngine:
    def __init__(self, model, tokenizer, *, max_batch: int = DEFAULT_MAX_BATCH, enable_thinking: bool = False,
                 max_prompt_tokens: int | None = None, ignore_eos: bool = False) -> None:
        self.model, self.tok = model, tokenizer
        self.max_batch = max_batch
        self.max_prompt_tokens = max_prompt_tokens
        self.enable_thinking = enable_thinking
        self.stop_ids = [] if ignore_eos else stop_token_ids(model, tokenizer)

    def render(self, messages: list[dict[str, str]]) -> str:
        return self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                            enable_thinking=self.enable_thinking)

    def generate(self, requests: list[GenRequest], *, temperature: float) -> list[GenOutput]:
        # A wave repeats each prompt G times: render and tokenize each distinct one once.
        rendered: dict[str, tuple[str, list[int]]] = {}
        pairs = []
        for r in requests:
            key = json.dumps(r.messages, sort_keys=True)
            if key not in rendered:
                text = self.render(r.messages)
                rendered[key] = (text, self.tok(text, add_special_tokens=False)["input_ids"])
            pairs.append(rendered[key])
        texts, ids_B = [t for t, _ in pairs], [list(ids) for _, ids in pairs]
        # A prompt over budget is not generated (its history is already too long to be
        # useful); it comes back empty and truncated, and the rest of the wave proceeds.
        fits = [self.max_prompt_tokens is None or len(ids) <= self.max_prompt_tokens for ids in ids_B]
        todo = [i for i, ok in enumerate(fits) if ok]
        done: dict[int, GenOutput] = {
            i: GenOutput(prompt_text=texts[i], prompt_ids=ids_B[i], completion_ids=[], completion_text="",
                         logprobs=[], finish_reason="length") for i, ok in enumerate(fits) if not ok}
        for chunk in self._chunks(requests, todo, [len(ids) for ids in ids_B]):
            outs = self._generate_chunk([requests[i] for i in chunk], [texts[i] for i in chunk],
                                        [ids_B[i] for i in chunk], temperature)
            done.update(zip(chunk, outs))
        return [done[i] for i in range(len(requests))]

    @torch.inference_mode()
    def _generate_chunk(self, reqs: list[GenRequest], texts: list[str], ids_B: list[list[int]],
                        temperature: float) -> list[GenOutput]:
        width = max(map(len, ids_B))
        pad = self.tok.pad_token_id
        dev = self.model.device
        input_ids = torch.tensor([[pad] * (width - len(x)) + x for x in ids_B], device=dev)
        attn = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids_B], device=dev)
        budget = max(r.max_new_tokens for r in reqs)
        policies = [r.policy for r in reqs]
        was_training = self.model.training
        set_training(self.model, False)  # no dropout while sampling
        try:
            with self._policies(policies) as route, folded_decode(self.model):
                logits_B, cache = self._prefill(input_ids, attn, policies, route, capacity=width + budget)
                if route is not None:
                    route(policies)
                seeds = [r.seed for r in reqs]
                gen_B_T, lp_B_T = self._decode(logits_B, cache, attn, budget, temperature,
                                               seeds if all(x is not None for x in seeds) else None)
        finally:
            set_training(self.model, was_training)
        return [self._finish(text, ids, gen, lp, r.max_new_tokens)
                for text, ids, gen, lp, r in zip(texts, ids_B, gen_B_T.tolist(), lp_B_T.tolist(), reqs)]

    def _prefill(self, input_ids_B: torch.Tensor, attn_B: torch.Tensor, policies_B: list[str], route=None,
                 capacity: int | None = None):
        """(logits of every row's next token [B, V], KV cache of every row's prompt), each distinct
        (prompt, policy) computed once and written to every row that repeats it. `route` (a
        mixed chunk) gets the policies of the rows actually run.

        A wave holds the G samples of each problem with identical prompts: their prefill is
        the same work G times over. The cache holds `capacity` positions (the prompt and the
        budget) before it has to grow.

        On a CPU the distinct prompts run CPU_PREFILL_TOKENS at a time: a forward's activations
        grow with its rows x width (a piece of 87 prompts of 219 tokens on SmolLM2 is 19,000
        tokens), and a CPU matmul gains nothing past a few thousand rows: on a three-role
        validation of 26,000 prompt tokens, the windows took 14 s where whole pieces took
        18 s. Each window writes straight into the rows of the one cache, so no cache of the
        distinct prompts is held beside the cache of all the rows.
        """
        keys = [(tuple(row), p) for row, p in zip(input_ids_B.tolist(), policies_B)]
        first: dict[tuple, int] = {}
        for i, k in enumerate(keys):
            first.setdefault(k, i)
        rep_U = list(first.values())
        slot = {k: u for u, k in enumerate(first)}
        slot_B = torch.tensor([slot[k] for k in keys], device=input_ids_B.device)
        ids_U, attn_U = input_ids_B[rep_U], attn_B[rep_U]
        pos_U = (attn_U.cumsum(-1) - 1).clamp(min=0)
        cache = buffer_cache(self.model.config, capacity or input_ids_B.shape[1])
        U, width = ids_U.shape
        step = U if self.model.device.type != "cpu" else max(1, CPU_PREFILL_TOKENS // width)
        logits_U = []
        with prefill_rows(cache, len(keys)) as fill:
            for a in range(0, U, step):
                b = min(a + step, U)
                dest_B = ((slot_B >= a) & (slot_B < b)).nonzero().squeeze(1)
                fill(dest_B, slot_B[dest_B] - a)
                if route is not None:
                    route([policies_B[i] for i in rep_U[a:b]])
                out = self.model(input_ids=ids_U[a:b], attention_mask=attn_U[a:b], position_ids=pos_U[a:b],
                                 past_key_values=cache, use_cache=True, logits_to_keep=last_position(width, ids_U.device))
                logits_U.append(out.logits[:, -1])
                del out
        return torch.cat(logits_U)[slot_B], cache

    def _decode(self, logits_B: torch.Tensor, cache, attn_B: torch.Tensor, budget: int,
                temperature: float, seeds: list[int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample up to `budget` tokens per row: (tokens [B, T], their log-probs [B, T]).

        The distribution is HF `generate`'s (logits / T, softmax; argmax at T = 0; a finished row
        gets pad tokens), without its per-step machinery, and the log-prob recorded is that of
        the distribution sampled from. The draw is inverse-CDF: one uniform u per row and step,
        and the token where the row's cumulative distribution first exceeds u. HF (and
        `torch.multinomial`) race one exponential per vocabulary entry instead, 49,152 draws a
        row on SmolLM2, which took a third of a SmolLM2 rollout (profiled): same distribution,
        other tokens for the same seed, so greedy decoding alone matches HF token for token.

        With `seeds` (one per row) each row draws its u from its own seeded stream instead of
        torch's global one, so a row's tokens depend on its seed alone, however the batch is
        split or ordered.
        """
        t = temperature if temperature > 0 else 1.0
        streams = None
        if seeds is not None and temperature > 0:
            streams = [torch.Generator(device=logits_B.device).manual_seed(int(x) % (2**63)) for x in seeds]
        pad = self.tok.pad_token_id
        stop = torch.tensor(self.stop_ids, dtype=torch.long, device=logits_B.device)
        unfinished_B = torch.ones(logits_B.shape[0], dtype=torch.bool, device=logits_B.device)
        pos_B = attn_B.sum(-1, keepdim=True)  # position of the next token: real tokens so far
        tokens, logps = [], []
        for step in range(budget):
            # Vocabulary-wide buffers are rows x 49,152 floats on SmolLM2 (49 MB at 250 rows):
            # one for the scores, then one for the log-probs, one for the distribution.
            if temperature > 0:
                logp = torch.log_softmax(logits_B.to(torch.float32, copy=True).div_(t), -1)
                u_B1 = torch.rand((logp.shape[0], 1), device=logp.device) if streams is None else \
                    torch.stack([torch.rand(1, generator=g, device=logp.device) for g in streams])
                # the probabilities of the log-softmax: no second vocabulary-wide softmax
                nxt = _inverse_cdf(logp.exp(), u_B1)
            else:
                scores = logits_B.float()
                logp, nxt = torch.log_softmax(scores, -1), scores.argmax(-1)
                del scores
            nxt = torch.where(unfinished_B, nxt, pad)
            tokens.append(nxt)
            logps.append(logp.gather(1, nxt.unsqueeze(1)).squeeze(1))
            unfinished_B &= ~torch.isin(nxt, stop)
            if step == budget - 1 or not bool(unfinished_B.any()):
                break
            attn_B = torch.cat([attn_B, attn_B.new_ones((attn_B.shape[0], 1))], 1)
            out = self.model(input_ids=nxt.unsqueeze(1), attention_mask=attn_B, position_ids=pos_B,
                             past_key_values=cache, use_cache=True)
            pos_B = pos_B + 1
            logits_B = out.logits[:, -1]
        if not tokens:
            empty = torch.zeros((logits_B.shape[0], 0), device=logits_B.device)
            return empty.long(), empty
        return torch.stack(tokens, 1), torch.stack(logps, 1)

    def _policies(self, row_policies: list[str]):
        """The context that runs each row on its policy (the chunk is one the model can mix).
        It yields None when every row has one policy, else `route(policies)` to call before a
        model call whose rows are not `row_policies` (the adapter weights are read once)."""
        if not hasattr(self.model, "peft_config"):
            return nullcontext()
        router = router_for(self.model)
        if len(set(row_policies)) == 1:
            # Most waves (the parallel slots of one role, everything under SP): one adapter,
            # no row mask.
            return router.policy(row_policies[0])
        return router.rows(row_policies)

    def _chunks(self, requests: list[GenRequest], todo: list[int], lengths: list[int]) -> list[list[int]]:
        """Row indices per generate call: one policy per call unless the model can mix these
        policies in one batch, at most max_batch rows, and on a CPU at most as many as keep
        the call's key/value cache within CPU_CACHE_BYTES."""
        policies = [requests[i].policy for i in todo]
        mixable = not hasattr(self.model, "peft_config") or len(set(policies)) <= 1 \
            or router_for(self.model).plain(policies)
        groups = [todo] if mixable else [[i for i in todo if requests[i].policy == p] for p in dict.fromkeys(policies)]
        per_position = cache_bytes_per_position(self.model.config, self.model.dtype) \
            if self.model.device.type == "cpu" else 0
        return [piece for g in groups for piece in self._fit(g, requests, lengths, per_position)]

    def _fit(self, rows: list[int], requests: list[GenRequest], lengths: list[int], per_position: int
             ) -> list[list[int]]:
        """`rows` in consecutive pieces of at most max_batch rows whose cache, rows x (longest
        prompt + longest budget) positions, stays within CPU_CACHE_BYTES (`per_position` 0: no
        bound). A validation wave of 300 rows of 190 positions on SmolLM2 held a 1.3 GB
        cache, twice over while the prefill's cache was spread to the rows, where decoding it
        in three pieces costs next to nothing on a CPU."""
        out: list[list[int]] = []
        cur: list[int] = []
        prompt = budget = 0  # the piece's longest prompt and longest budget: its cache's capacity
        for i in rows:
            p, b = max(prompt, lengths[i]), max(budget, requests[i].max_new_tokens)
            if cur and (len(cur) == self.max_batch or (len(cur) + 1) * (p + b) * per_position > CPU_CACHE_BYTES):
                out.append(cur)
                cur, p, b = [], lengths[i], requests[i].max_new_tokens
            cur.append(i)
            prompt, budget = p, b
        return out + [cur] if cur else out

    def _finish(self, prompt_text: str, prompt_ids: list[int], gen: list[int], lp: list[float],
                budget: int) -> GenOutput:
        end = next((i + 1 for i, t in enumerate(gen[:budget]) if t in self.stop_ids), None)
        cut = end if end is not None else min(budget, len(gen))
        comp = gen[:cut]
        return GenOutput(prompt_text=prompt_text, prompt_ids=prompt_ids, completion_ids=comp,
                         completion_text=self.tok.decode(comp, skip_special_tokens=True),
                         logprobs=lp[:cut], finish_reason="stop" if end is not None else "length")


def _inverse_cdf(probs_B_V: torch.Tensor, u_B1: torch.Tensor) -> torch.Tensor:
    """The token of each row whose cumulative probability first exceeds u (in [0, 1)).
    `probs_B_V` is overwritten with its cumulative sum."""
    cdf_B_V = probs_B_V.cumsum_(-1)  # in place: the caller's probabilities are a temporary
    # u is scaled by the row's own total (a float32 sum of 49k terms is 1 only to ~1e-6); right=True
    # steps over zero-probability tokens, whose cumulative value equals their predecessor's.
    nxt_B = torch.searchsorted(cdf_B_V, u_B1 * cdf_B_V[:, -1:], right=True).squeeze(1)
    return nxt_B.clamp_(max=probs_B_V.shape[-1] - 1)
