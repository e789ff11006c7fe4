"""Policies: which adapter plays which role (routing, pure data) and the PEFT model that holds them."""
from rolecall.policies.routing import BASE_POLICY, Routing, build_routing

__all__ = ["BASE_POLICY", "Routing", "build_routing"]
