"""How many tokens one forward/backward may hold: `algo.micro_batch_tokens: auto`.

A training pass keeps every layer's activations of every token in its micro-batch until the
backward frees them, plus the micro-batch's logits over the whole vocabulary and their
gradient. On SmolLM2-135M in bfloat16 that is about 1 MB a token (measured with autograd's
saved-tensor hooks: 26 KB a layer, 30 layers, and 2 x 49,152 logit values), so the old fixed
budget of 16,384 tokens let one 8 x 8 step of 48-token answers hold 3.8 GB of activations, and
a multi-role step with long prompts 10 GB, where the model itself is 0.27 GB.

On a CPU a smaller micro-batch costs next to no speed: each matmul still has a thousand rows,
and on the compute benchmark 4,096-token micro-batches took 96 s where 16,384 took 95 s while
peak memory fell from 10.8 to 2.6 GiB. So `auto` sizes CPU micro-batches to an activation
budget (`CPU_ACTIVATION_BYTES`) by the estimate below; on an accelerator it keeps 16,384, whose
memory a GPU has and whose larger matmuls it does use.
"""
from __future__ import annotations

import torch

CPU_ACTIVATION_BYTES = 1 << 30  # 1 GiB of activations per micro-batch on a CPU
ACCELERATOR_TOKENS = 16384
MIN_TOKENS = 256  # below this, per-call overhead starts to show; one long row gets its own micro-batch anyway


def activation_bytes_per_token(config, dtype: torch.dtype) -> int:
    """An upper estimate of what training keeps per token of a micro-batch, from the model's
    config: per layer, the two RMS norms' float32 copies (2 x hidden x 4 bytes), attention's
    inputs, queries, keys, values and output (8 x hidden values), the gated MLP's four
    intermediate-width tensors (4 x intermediate); then the logits and their gradient (2 x vocab).
    On SmolLM2-135M in bfloat16 it reads 0.98 MB a token; measured there: 0.89 MB of saved
    tensors and logits after the forward, before the backward adds the logits' gradient."""
    b = dtype.itemsize
    hidden = int(getattr(config, "hidden_size", 0) or 0)
    inter = int(getattr(config, "intermediate_size", 0) or 4 * hidden)
    layers = int(getattr(config, "num_hidden_layers", 0) or 0)
    vocab = int(getattr(config, "vocab_size", 0) or 0)
    return layers * (2 * hidden * 4 + (8 * hidden + 4 * inter) * b) + 2 * vocab * b


def micro_batch_tokens(setting: int | str, model) -> int:
    """The token budget of one forward/backward: `setting` itself when it is a number; for
    `auto`, the CPU activation budget over the per-token estimate (clamped to
    [MIN_TOKENS, ACCELERATOR_TOKENS]), or ACCELERATOR_TOKENS off the CPU."""
    if setting != "auto":
        return int(setting)
    device = getattr(model, "device", torch.device("cpu"))
    if torch.device(device).type != "cpu":
        return ACCELERATOR_TOKENS
    per_token = activation_bytes_per_token(model.config, getattr(model, "dtype", torch.float32))
    if per_token <= 0:  # a config without the usual sizes: keep the old fixed budget
        return ACCELERATOR_TOKENS
    return max(MIN_TOKENS, min(ACCELERATOR_TOKENS, CPU_ACTIVATION_BYTES // per_token))
