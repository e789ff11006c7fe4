"""A tiny llama GGUF file written here with the `gguf` package's writer: no network needed.

Byte-level BPE over the 256 byte symbols plus ChatML's special tokens, random weights, one
tensor quantized to Q8_0 and one to Q4_1 (SmolLM2's own file mixes both), the rest F32."""
from __future__ import annotations

from pathlib import Path

import numpy as np

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
HIDDEN, FF, LAYERS, HEADS, KV_HEADS = 64, 128, 2, 4, 2


def _byte_symbols() -> list[str]:
    """GPT-2's printable stand-ins for the 256 bytes (what a byte-level BPE vocabulary lists)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars, n = keep[:], 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(keep, chars))]


def write_tiny_gguf(path: Path, seed: int = 0) -> Path:
    import gguf

    rng = np.random.default_rng(seed)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    merges = ["Ġ t", "h e", "Ġt he"]
    tokens = specials + _byte_symbols() + ["Ġt", "he", "Ġthe"]
    vocab = len(tokens)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(LAYERS)
    w.add_context_length(256)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FF)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    w.add_rope_dimension_count(HIDDEN // HEADS)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([3] * len(specials) + [1] * (vocab - len(specials)))
    w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_pad_token_id(2)
    w.add_add_bos_token(False)
    w.add_chat_template(CHATML)

    def f32(*shape):
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)

    def quantized(name, array, qtype):
        data = gguf.quants.quantize(array, qtype)
        w.add_tensor(name, data, raw_shape=data.shape, raw_dtype=qtype)

    w.add_tensor("token_embd.weight", f32(vocab, HIDDEN))
    w.add_tensor("output_norm.weight", np.ones(HIDDEN, np.float32))
    hd = HIDDEN // HEADS
    for i in range(LAYERS):
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", np.ones(HIDDEN, np.float32))
        w.add_tensor(b + "ffn_norm.weight", np.ones(HIDDEN, np.float32))
        w.add_tensor(b + "attn_q.weight", f32(HIDDEN, HIDDEN))
        w.add_tensor(b + "attn_k.weight", f32(KV_HEADS * hd, HIDDEN))
        w.add_tensor(b + "attn_v.weight", f32(KV_HEADS * hd, HIDDEN))
        w.add_tensor(b + "attn_output.weight", f32(HIDDEN, HIDDEN))
        quantized(b + "ffn_gate.weight", f32(FF, HIDDEN), gguf.GGMLQuantizationType.Q8_0)
        quantized(b + "ffn_up.weight", f32(FF, HIDDEN), gguf.GGMLQuantizationType.Q4_1)
        w.add_tensor(b + "ffn_down.weight", f32(HIDDEN, FF))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
