"""A character-level tokenizer (the `tokenizers` library) with a ChatML chat template."""
from __future__ import annotations

import string

PAD, IM_START, IM_END, UNK = "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|unk|>"

# ChatML as Qwen3 uses it; `enable_thinking` is accepted and ignored (no think blocks here).
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tokenizer():
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = [PAD, IM_START, IM_END, UNK]
    chars = sorted(set(string.printable) - set("\t\r\x0b\x0c"))
    vocab = {tok: i for i, tok in enumerate(specials + chars)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.add_special_tokens(specials)
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token=IM_END, pad_token=PAD, unk_token=UNK)
    tok.chat_template = CHAT_TEMPLATE
    return tok
