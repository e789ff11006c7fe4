"""Running a model's attention through a function of rolecall's for the length of a block."""
from __future__ import annotations

from contextlib import contextmanager

_registered: set[str] = set()


@contextmanager
def attention_as(model, name: str, fn, mask_like: str | None = None):
    """Within: every attention layer of `model` calls `fn` (registered with transformers as
    `name` on first use; it is looked up there by name, so register one function per name).
    `mask_like` names a built-in implementation whose attention masks the model then builds
    for `fn`; without it the caller passes the masks itself. Restored on exit, errors included."""
    if name not in _registered:
        from transformers import AttentionInterface

        AttentionInterface.register(name, fn)
        if mask_like is not None:
            from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

            AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS[mask_like])
        _registered.add(name)
    cfg = model.config
    before = cfg._attn_implementation
    cfg._attn_implementation = name
    try:
        yield
    finally:
        cfg._attn_implementation = before
