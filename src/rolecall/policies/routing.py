"""Routing tables: role -> policy, and which policies train. Pure data, no model code.

Shared-Policy (SP): every role -> one adapter `shared`. Isolated-Policy (IP): each role
type -> its own adapter named after the role (parallel slots of a role share it).
Custom: an explicit {role: policy} map. The reserved policy `base` is the base model
with adapters disabled (frozen): a role routed there falls through to the base model.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

BASE_POLICY = "base"
SHARED_POLICY = "shared"


@dataclass(frozen=True)
class Routing:
    routes: dict[str, str]  # role -> policy
    trainable: tuple[str, ...]  # adapters that get an optimizer, in a fixed order
    frozen: tuple[str, ...]  # adapters that exist but never move

    @property
    def adapters(self) -> tuple[str, ...]:
        return self.trainable + self.frozen


def build_routing(spec: str | Mapping[str, str], roles: Iterable[str],
                  policies: Mapping[str, bool] | None = None) -> Routing:
    """Validate a routing spec against the workflow's roles and the policy table.

    `policies` maps adapter name -> trainable. When omitted, every routed adapter exists
    and trains; when given, a role routed to a name missing from it is an error.
    """
    roles = tuple(roles)
    if spec == "isolated":
        routes = {r: r for r in roles}
    elif spec == "shared":
        routes = {r: SHARED_POLICY for r in roles}
    elif isinstance(spec, Mapping):
        missing = [r for r in roles if r not in spec]
        extra = [r for r in spec if r not in roles]
        if missing:
            raise ValueError(f"routing: role(s) {missing} have no policy; the workflow's roles are {list(roles)}")
        if extra:
            raise ValueError(f"routing: {extra} are not roles of this workflow; its roles are {list(roles)}")
        bad = [f"{r}={p!r}" for r, p in spec.items() if not isinstance(p, str) or not p.strip()]
        if bad:
            raise ValueError(f"routing: policy names must be non-empty strings, got {bad}")
        routes = dict(spec)
    else:
        raise ValueError(f"routing: expected 'isolated', 'shared' or a {{role: policy}} map, got {spec!r}")
    routed = sorted({p for p in routes.values() if p != BASE_POLICY})
    if policies is None:
        policies = {name: True for name in routed}
    missing = [f"{r} -> {p}" for r, p in routes.items() if p != BASE_POLICY and p not in policies]
    if missing:
        raise ValueError(f"routing: {missing} route to policies that do not exist; "
                         f"defined policies: {sorted(policies)} (and {BASE_POLICY!r}, the bare base model)")
    if BASE_POLICY in policies:
        raise ValueError(f"policies: {BASE_POLICY!r} is reserved for the base model with adapters disabled")
    names = sorted(policies)
    return Routing(routes=routes, trainable=tuple(n for n in names if policies[n]),
                   frozen=tuple(n for n in names if not policies[n]))
