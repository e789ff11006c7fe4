"""Optimizer-side diagnostics of the update, per role and per mini-batch: sums while the
update runs, means at the end.

π = trainer log-prob, μ = rollout log-prob, π_old = the policy before the iteration's first
optimizer step; every importance ratio is clamped at ±20 in log space, as the paper's code.
Definitions: docs/diagnostics.md.
"""
from __future__ import annotations

import math
from collections import defaultdict

import torch

from rolecall.schema import AlgoCfg
from rolecall.loss import kl_to_ref_per_token, pg_per_token
from rolecall.algo.batch import Row

_CLAMP = 20.0


class RoleStats:
    """Per-row sums by role, and χ² / clip fraction by (policy, mini-batch index)."""

    def __init__(self, agg: str = "seq-mean-token-mean") -> None:
        self.agg = agg
        self.s: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.mb: dict[tuple[str, int], dict[str, float]] = defaultdict(lambda: defaultdict(float))

    def add(self, role: str, **vals: float) -> None:
        for k, v in vals.items():
            self.s[role][k] += v

    # Added alike on every rank after the gradients are summed (see `add_grad_shares`).
    _SAME_ON_EVERY_RANK = frozenset({"grad_norm", "grad_share", "opt_steps"})

    def sums(self) -> tuple[dict, dict]:
        """The raw sums, as plain dicts (to send to other processes)."""
        return ({k: dict(v) for k, v in self.s.items()}, {k: dict(v) for k, v in self.mb.items()})

    def combine(self, parts: list[tuple[dict, dict]]) -> None:
        """Replace the sums by the total over `parts` (every data-parallel rank's `sums()`, this
        one's included), so the metrics describe the whole batch and not one rank's micro-batches."""
        self.s.clear()
        self.mb.clear()
        for i, (s, mb) in enumerate(parts):
            for role, vals in s.items():
                for k, v in vals.items():
                    if i == 0 or k not in self._SAME_ON_EVERY_RANK:
                        self.s[role][k] += v
            for key, vals in mb.items():
                for k, v in vals.items():
                    self.mb[key][k] += v

    def result(self) -> dict[str, dict[str, float]]:
        out = {}
        for role, s in self.s.items():
            tok, seq, steps = max(s["tokens"], 1.0), max(s["seqs"], 1.0), max(s["opt_steps"], 1.0)
            # The role's part of the loss, reduced as the loss is (dual clip and aggregation included).
            loss = {"token-mean": s["pg_sum"] / tok, "seq-mean-token-mean": s["pg_seq_mean"] / seq,
                    "seq-mean-token-sum": s["pg_sum"] / seq}[self.agg]
            out[role] = {"loss": loss, "chi2_token": s["ratio2"] / tok - 1.0,
                         "chi2_seq": s["seq_ratio2"] / seq - 1.0,
                         "training_ppl": s["ppl"] / seq, "rollout_ppl": s["rollout_ppl"] / seq,
                         "kl": s["kl"] / tok, "k3_kl": s["k3_kl"] / tok,
                         "entropy": s["entropy"] / tok, "clip_frac": s["clipped"] / tok, "tokens": s["tokens"]}
            if s["kl_ref_tokens"]:
                out[role]["kl_ref"] = s["kl_ref"] / s["kl_ref_tokens"]
            if s["opt_steps"]:
                out[role]["grad_norm"] = s["grad_norm"] / steps
                out[role]["grad_share"] = s["grad_share"] / steps
        return out

    def by_minibatch(self, policy: str) -> dict[str, float]:
        """`chi2_token_mb<i>` and `clip_frac_mb<i>`: mini-batch 0 is on-policy, later ones are not."""
        out = {}
        for (p, i), s in sorted(self.mb.items()):
            if p == policy and s["tokens"]:
                out[f"chi2_token_mb{i}"] = s["ratio2"] / s["tokens"] - 1.0
                out[f"clip_frac_mb{i}"] = s["clipped"] / s["tokens"]
        return out


def collect(stats: RoleStats, rows: list[Row], b: dict, logp, old, ent, algo: AlgoCfg,
            mini_index: dict[str, int] | None = None, ref: torch.Tensor | None = None, ref_rows: list[int] = ()) -> None:
    """Add one micro-batch's per-row sums of every optimizer-side diagnostic.

    `mini_index` is each policy's mini-batch index in this iteration. `ref` [B, T] holds
    base-model log-probs, meaningful for the rows at positions `ref_rows` only (kl_ref is
    estimated on a sample of rows unless the KL loss needs them all: see `kl_ref_sample`).
    """
    with torch.no_grad():
        m = b["mask"]
        pg, _, clipped, _ = pg_per_token(logp, old, b["adv"], m, clip_low=algo.clip_low, clip_high=algo.clip_high,
                                         dual_clip=algo.dual_clip)
        clipped = clipped.to(m.dtype)
        log_r = (logp - b["rollout_logp"]) * m  # log π/μ on completion tokens
        r = torch.exp(log_r.clamp(-_CLAMP, _CLAMP))
        vs_rollout = r ** 2 * m
        k3 = (r - 1 - log_r) * m  # KL(μ‖π) estimator, >= 0, low variance
        seq_ratio2 = torch.exp((2 * log_r.sum(-1)).clamp(-_CLAMP, _CLAMP))
        n_T = m.sum(-1).clamp(min=1)
        kl_ref: dict[int, float] = {}
        if ref is not None and len(ref_rows):
            sub = list(ref_rows)
            per_row = kl_to_ref_per_token(logp[sub], ref[sub], m[sub]).sum(-1)
            kl_ref = {i: float(v) for i, v in zip(sub, per_row)}
        for i, row in enumerate(rows):
            extra = {"kl_ref": kl_ref[i], "kl_ref_tokens": float(m[i].sum())} if i in kl_ref else {}
            pg_sum = float(pg[i].sum())
            stats.add(row.role, tokens=float(m[i].sum()), seqs=1.0, pg_sum=pg_sum, pg_seq_mean=pg_sum / float(n_T[i]),
                      ratio2=float(vs_rollout[i].sum()), seq_ratio2=float(seq_ratio2[i]),
                      kl=float(-log_r[i].sum()), k3_kl=float(k3[i].sum()),
                      entropy=float((ent[i] * m[i]).sum()), clipped=float(clipped[i].sum()),
                      ppl=math.exp(min(50.0, -float((logp[i] * m[i]).sum() / n_T[i]))),
                      rollout_ppl=math.exp(min(50.0, -float((b["rollout_logp"][i] * m[i]).sum() / n_T[i]))),
                      **extra)
            mb = stats.mb[(row.policy, (mini_index or {}).get(row.policy, 0))]
            mb["tokens"] += float(m[i].sum())
            mb["ratio2"] += float(vs_rollout[i].sum())
            mb["clipped"] += float(clipped[i].sum())


def flat_grad(params: list[torch.nn.Parameter]) -> torch.Tensor:
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).detach().flatten().float()
                      for p in params])


def add_grad_shares(stats: RoleStats, roles: list[str], role_grads: dict[str, torch.Tensor], total_norm: float) -> None:
    """Each role's gradient norm and its projection on the step's total gradient (shares sum to 1)."""
    if len(roles) == 1:
        stats.add(roles[0], grad_norm=total_norm, grad_share=1.0, opt_steps=1.0)
        return
    total = sum(role_grads.values())
    denom = float(total @ total)
    for role, g in role_grads.items():
        share = float(g @ total) / denom if denom > 0 else float("nan")
        stats.add(role, grad_norm=float(g.norm()), grad_share=share, opt_steps=1.0)


def kl_ref_sample(rows: list[Row], per_role: int) -> set[int]:
    """ids of the rows kl_ref is measured on: up to `per_role` evenly spaced rows of each role.

    The base model's log-probs cost one extra forward over the rows measured; a fixed-size
    sample keeps that cost small and independent of batch size. Rows arrive in episode order
    (problems are shuffled per step), so evenly spaced rows span the step's problems. No
    random draw: the training RNG stream is left untouched.
    """
    by_role: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        by_role[r.role].append(r)
    out: set[int] = set()
    for rs in by_role.values():
        k = min(per_role, len(rs))
        out |= {id(rs[(j * len(rs)) // k]) for j in range(k)}
    return out
