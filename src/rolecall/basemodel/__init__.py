"""The embedded default base model: a tiny Qwen3 + character tokenizer, pretrained on role transcripts."""
