"""A meta-policy network as the deliberator of the `deliberation` workflow."""
from __future__ import annotations

import os
import random

import torch

from rolecall.metapolicy.checkpoint import read_checkpoint
from rolecall.metapolicy.corpus import collate
from rolecall.metapolicy.network import MetaPolicy
from rolecall.metapolicy.state import round_features


class MetaDeliberator:
    """Each agent's action from the network: the most likely one (`greedy`), or a sample.

    Sampling uses its own seeded generator, never torch's global one, so the LLM's sampling
    is the same whichever deliberator plays.
    """

    def __init__(self, policy: MetaPolicy, *, greedy: bool = True, seed: int = 0) -> None:
        self.policy, self.greedy, self.rng = policy, greedy, random.Random(seed)

    @staticmethod
    def from_checkpoint(path: str | os.PathLike, *, greedy: bool = True, seed: int = 0) -> "MetaDeliberator":
        return MetaDeliberator(load_policy(path), greedy=greedy, seed=seed)

    def probs(self, states) -> torch.Tensor:
        rows = round_features(list(states))
        batch = collate(rows, labels=[0] * len(rows))
        self.policy.eval()
        return self.policy.probs(batch.own_B_D, batch.peers_B_P_D, batch.peer_mask_B_P)

    async def decide(self, problem, team, round_, table) -> list[int]:
        probs_B_A = self.probs(table.states)
        if self.greedy:
            return [int(i) for i in probs_B_A.argmax(-1)]
        return [self.rng.choices(range(probs_B_A.shape[-1]), weights=row.tolist())[0] for row in probs_B_A]


def policy_shape(extra: dict) -> dict:
    """The constructor arguments a checkpoint's `extra` records (defaults for older files)."""
    return {"hidden": int(extra.get("hidden", 32)), "heads": int(extra.get("heads", 2))}


def load_policy(path: str | os.PathLike) -> MetaPolicy:
    """The network saved in a meta-policy checkpoint (ValueError naming the file if it does not fit)."""
    state = read_checkpoint(path)
    policy = MetaPolicy(**policy_shape(state["extra"]))
    weight = state["policy"].get("encoder.0.weight")
    if weight is not None and weight.shape[-1] != policy.state_dim:  # the state's features changed since
        raise ValueError(f"meta-policy checkpoint {path} reads states of {weight.shape[-1]} features; this rolecall's "
                         f"have {policy.state_dim} (rolecall.metapolicy.FEATURES): train it again")
    try:
        policy.load_state_dict(state["policy"])
    except RuntimeError as e:
        raise ValueError(f"meta-policy checkpoint {path} does not fit a MetaPolicy of {policy_shape(state['extra'])}: "
                         f"{str(e).splitlines()[0]}") from None
    return policy
