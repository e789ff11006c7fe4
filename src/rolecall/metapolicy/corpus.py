"""Tensor batches of meta-cognitive states with oracle labels or per-action rewards.

A row is one agent at one deliberation round: its own feature vector, its peers' (padded to
the batch's largest group and masked), and either the oracle action (supervised bootstrap)
or the reward observed for EVERY action from that same state (counterfactual branches, the
offline corpus SoftRankPO learns from in "Learning to Deliberate: Meta-policy Collaboration
for Agentic LLMs with Multi-agent Reinforcement Learning").
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from rolecall.metapolicy.state import ACTIONS, STATE_DIM


@dataclass(frozen=True)
class Corpus:
    """B rows; `peer_mask_B_P` is True where a peer slot is padding (as key_padding_mask)."""

    own_B_D: torch.Tensor
    peers_B_P_D: torch.Tensor
    peer_mask_B_P: torch.Tensor
    labels_B: torch.Tensor | None = None
    rewards_B_A: torch.Tensor | None = None

    def __post_init__(self) -> None:
        b, p, d = self.peers_B_P_D.shape
        if self.own_B_D.shape != (b, d):
            raise ValueError(f"own_B_D is {tuple(self.own_B_D.shape)}, peers_B_P_D is {(b, p, d)}")
        if self.peer_mask_B_P.shape != (b, p) or self.peer_mask_B_P.dtype != torch.bool:
            raise ValueError(f"peer_mask_B_P must be a bool tensor of shape {(b, p)}")
        if self.labels_B is None and self.rewards_B_A is None:
            raise ValueError("a corpus needs labels_B (oracle actions) or rewards_B_A (reward of each action)")
        if self.labels_B is not None:
            if self.labels_B.shape != (b,) or self.labels_B.dtype != torch.long:
                raise ValueError(f"labels_B must be a long tensor of shape {(b,)}")
            if b and not (0 <= int(self.labels_B.min()) and int(self.labels_B.max()) < len(ACTIONS)):
                raise ValueError(f"labels_B must index ACTIONS (0..{len(ACTIONS) - 1})")
        if self.rewards_B_A is not None:
            if self.rewards_B_A.dim() != 2 or self.rewards_B_A.shape[0] != b:
                raise ValueError(f"rewards_B_A must have shape ({b}, n_actions)")
            if not torch.isfinite(self.rewards_B_A).all():
                raise ValueError("rewards_B_A holds a non-finite reward")

    def __len__(self) -> int:
        return self.own_B_D.shape[0]

    def take(self, index_B: torch.Tensor) -> Corpus:
        """The rows at `index_B`, in that order."""
        pick = (lambda t: None if t is None else t[index_B])  # noqa: E731
        return Corpus(self.own_B_D[index_B], self.peers_B_P_D[index_B], self.peer_mask_B_P[index_B],
                      pick(self.labels_B), pick(self.rewards_B_A))


def collate(rows: Sequence[tuple[Sequence[float], Sequence[Sequence[float]]]], *,
            labels: Sequence[int] | None = None,
            rewards: Sequence[Sequence[float]] | None = None) -> Corpus:
    """A Corpus from `features()` outputs (own vector, peer vectors), padding peers to the most any row has."""
    n_peers = max((len(peers) for _, peers in rows), default=0)
    own_B_D = torch.tensor([list(own) for own, _ in rows], dtype=torch.float32).reshape(len(rows), STATE_DIM)
    peers_B_P_D = torch.zeros(len(rows), n_peers, STATE_DIM)
    peer_mask_B_P = torch.ones(len(rows), n_peers, dtype=torch.bool)
    for b, (_, peers) in enumerate(rows):
        if peers:
            peers_B_P_D[b, :len(peers)] = torch.tensor([list(v) for v in peers], dtype=torch.float32)
            peer_mask_B_P[b, :len(peers)] = False
    return Corpus(
        own_B_D, peers_B_P_D, peer_mask_B_P,
        labels_B=None if labels is None else torch.tensor(list(labels), dtype=torch.long),
        rewards_B_A=None if rewards is None else torch.tensor([list(r) for r in rewards], dtype=torch.float32),
    )
