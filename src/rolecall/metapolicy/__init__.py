"""Meta-policies that choose persist / refine / concede for deliberating agents, trained with SoftRankPO.

The state parsing (`rolecall.metapolicy.state`) is plain Python, read by the deliberation
workflow; the network, corpus, training and checkpoints need torch and load on first use, so
importing the workflows does not import torch.
"""
from __future__ import annotations

import importlib

from rolecall.metapolicy.state import (
    ACTIONS,
    CONCEDE,
    FEATURES,
    PERSIST,
    REFINE,
    STATE_DIM,
    AgentState,
    features,
    parse_profile,
    round_features,
)

_LAZY = {
    "load_checkpoint": "checkpoint", "read_checkpoint": "checkpoint", "save_checkpoint": "checkpoint",
    "Corpus": "corpus", "collate": "corpus", "MetaPolicy": "network", "MetaDeliberator": "decider",
    **{name: "train" for name in ("FitResult", "epoch_order", "fit", "make_optimizer", "sft_loss",
                                  "softrank_advantages", "softrank_loss", "softrank_objective")},
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f"rolecall.metapolicy.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'rolecall.metapolicy' has no attribute {name!r}")


__all__ = [
    "ACTIONS", "CONCEDE", "FEATURES", "PERSIST", "REFINE", "STATE_DIM", "AgentState", "features",
    "parse_profile", "round_features", *_LAZY,
]
