"""The meta-policy network: own state attends over peer states, then scores the three actions.

As in "Learning to Deliberate: Meta-policy Collaboration for Agentic LLMs with Multi-agent
Reinforcement Learning" (MPDF): a shared encoder embeds the agent's own meta-cognitive state
and each peer's; cross-attention (query = own, keys/values = peers) pools the peers; the own
embedding and that context go through an MLP to action logits.
"""
from __future__ import annotations

import torch
from torch import nn

from rolecall.metapolicy.state import ACTIONS, STATE_DIM


class MetaPolicy(nn.Module):
    """Logits over ACTIONS from (own_B_D, peers_B_P_D, peer_mask_B_P); a few thousand parameters.

    `peer_mask_B_P` follows `nn.MultiheadAttention`'s key_padding_mask: True marks an absent
    peer (padding). Absent peers cannot influence the output, whatever their values.
    """

    def __init__(self, state_dim: int = STATE_DIM, hidden: int = 32, heads: int = 2,
                 n_actions: int = len(ACTIONS)) -> None:
        super().__init__()
        self.state_dim = state_dim
        self.encoder = nn.Sequential(nn.Linear(state_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden))
        self.attention = nn.MultiheadAttention(hidden, heads, batch_first=True)
        # Always-present extra key: an agent alone (or with every peer masked) still has
        # something to attend to, so softmax never sees an all -inf row (which gives NaN).
        self.null_peer_H = nn.Parameter(torch.zeros(hidden))
        self.head = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.Tanh(), nn.Linear(hidden, n_actions))

    def forward(self, own_B_D: torch.Tensor, peers_B_P_D: torch.Tensor,
                peer_mask_B_P: torch.Tensor | None = None) -> torch.Tensor:
        batch, n_peers, dim = peers_B_P_D.shape
        if own_B_D.shape != (batch, self.state_dim) or dim != self.state_dim:
            raise ValueError(f"expected own (B, {self.state_dim}) and peers (B, P, {self.state_dim}); "
                             f"got {tuple(own_B_D.shape)} and {tuple(peers_B_P_D.shape)}")
        if peer_mask_B_P is None:
            peer_mask_B_P = torch.zeros(batch, n_peers, dtype=torch.bool, device=own_B_D.device)
        # Zeroing absent peers first keeps even NaN padding out (0 attention weight x NaN = NaN).
        peers_B_P_D = peers_B_P_D.masked_fill(peer_mask_B_P.unsqueeze(-1), 0.0)

        own_B_H = self.encoder(own_B_D)
        null_B_1_H = self.null_peer_H.expand(batch, 1, -1)
        keys_B_K_H = torch.cat([null_B_1_H, self.encoder(peers_B_P_D)], dim=1)
        absent_B_K = torch.cat([torch.zeros(batch, 1, dtype=torch.bool, device=own_B_D.device),
                                peer_mask_B_P.bool()], dim=1)
        context_B_1_H, _ = self.attention(own_B_H.unsqueeze(1), keys_B_K_H, keys_B_K_H,
                                          key_padding_mask=absent_B_K, need_weights=False)
        return self.head(torch.cat([own_B_H, context_B_1_H.squeeze(1)], dim=-1))

    @torch.no_grad()
    def probs(self, own_B_D: torch.Tensor, peers_B_P_D: torch.Tensor,
              peer_mask_B_P: torch.Tensor | None = None) -> torch.Tensor:
        """Action probabilities without a graph (for acting and evaluation)."""
        return self.forward(own_B_D, peers_B_P_D, peer_mask_B_P).softmax(-1)
