"""Meta-policies that choose persist / refine / concede for deliberating agents, trained with SoftRankPO."""
from rolecall.metapolicy.checkpoint import load_checkpoint, read_checkpoint, save_checkpoint
from rolecall.metapolicy.corpus import Corpus, collate
from rolecall.metapolicy.network import MetaPolicy
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
from rolecall.metapolicy.train import (
    FitResult,
    epoch_order,
    fit,
    make_optimizer,
    sft_loss,
    softrank_advantages,
    softrank_loss,
    softrank_objective,
)

__all__ = [
    "ACTIONS", "CONCEDE", "FEATURES", "PERSIST", "REFINE", "STATE_DIM",
    "AgentState", "Corpus", "FitResult", "MetaPolicy",
    "collate", "epoch_order", "features", "fit", "load_checkpoint", "make_optimizer", "parse_profile",
    "read_checkpoint", "round_features", "save_checkpoint", "sft_loss", "softrank_advantages",
    "softrank_loss", "softrank_objective",
]
