"""One engine over several base models: each request goes to the engine of its policy's base.

A team whose policies sit on different base models (a small model for one role, a larger one
for the others) is served by one engine per base in the same process. Each engine
renders its requests with its own tokenizer and chat template, so text passes between roles
as text. The rows of one wave are split by base, each part is generated in one batch, and the
outputs come back in the order of the requests.
"""
from __future__ import annotations

from collections.abc import Mapping

from rolecall.engines.base import Engine, GenOutput, GenRequest


class RoutedEngine:
    def __init__(self, by_policy: Mapping[str, Engine], default: Engine) -> None:
        """`by_policy`: the engine of each policy on a base other than the run's; every other
        policy (and `base`, the bare model) goes to `default`."""
        self.by_policy, self.default = dict(by_policy), default

    def engine_for(self, policy: str) -> Engine:
        return self.by_policy.get(policy, self.default)

    def generate(self, requests: list[GenRequest], *, temperature: float) -> list[GenOutput]:
        parts: dict[int, tuple[Engine, list[int]]] = {}
        for i, r in enumerate(requests):
            engine = self.engine_for(r.policy)
            parts.setdefault(id(engine), (engine, []))[1].append(i)
        out: list[GenOutput | None] = [None] * len(requests)
        for engine, rows in parts.values():
            for i, o in zip(rows, engine.generate([requests[i] for i in rows], temperature=temperature), strict=True):
                out[i] = o
        return out  # type: ignore[return-value]
