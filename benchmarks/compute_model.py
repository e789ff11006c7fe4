"""The benchmark model of compute.py and compute_peers.py: Qwen3's layout at
28 M parameters with random weights, so matrix multiplies dominate the work measured."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch


@dataclass(frozen=True)
class Shape:
    """The benchmark model: Qwen3's layout at 28 M parameters."""

    hidden: int = 512
    layers: int = 8
    heads: int = 8
    kv_heads: int = 4
    head_dim: int = 64
    intermediate: int = 1792
    vocab: int = 100  # rolecall's character tokenizer
    lora_r: int = 16

    def linears(self) -> list[tuple[int, int]]:
        """(in, out) of each linear layer of one decoder layer: q, k, v, o, gate, up, down."""
        d, a, kv, i = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim, self.intermediate
        return [(d, a), (d, kv), (d, kv), (a, d), (d, i), (d, i), (i, d)]

    @property
    def n_lin(self) -> int:
        return self.layers * sum(i * o for i, o in self.linears())

    @property
    def lora_flops_per_token(self) -> int:  # forward, one adapter
        return self.layers * sum(2 * self.lora_r * (i + o) for i, o in self.linears())

    def attn_flops(self, context: int) -> int:
        """Forward attention FLOPs of one token attending to `context` positions, all layers."""
        return self.layers * 4 * self.heads * self.head_dim * context


def make_model(directory: Path, shape: Shape = Shape(), seed: int = 0) -> Path:
    """A Qwen3 of `shape` with random weights, rolecall's character tokenizer and chat template."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from rolecall.basemodel.tokenizer import build_tokenizer
    from rolecall.policies.model import embedded_dir

    tok = build_tokenizer()
    torch.manual_seed(seed)
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=shape.hidden, intermediate_size=shape.intermediate,
                      num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
                      num_key_value_heads=shape.kv_heads, head_dim=shape.head_dim, max_position_embeddings=4096,
                      tie_word_embeddings=True, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    Qwen3ForCausalLM(cfg).save_pretrained(directory)
    tok.save_pretrained(directory)
    template = embedded_dir() / "chat_template.jinja"
    (directory / "chat_template.jinja").write_text(template.read_text())
    return directory
