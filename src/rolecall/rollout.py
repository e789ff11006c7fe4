"""Rollout: run P x G workflow episodes concurrently, batching every wave of LLM calls.

Each episode is an asyncio task. When every live task is waiting on a model call, the
pending calls form one *wave*: a single `engine.generate` over all of them (mixed
policies in one batch). Results resume the tasks, which issue the next wave, and so on.
"""
from __future__ import annotations

import asyncio
from typing import Any, Callable, Mapping

from rolecall.engines.base import Engine, GenRequest
from rolecall.types import Episode, Problem, Turn
from rolecall.workflows.base import Message, Workflow


class _Waves:
    """Collects model calls until the event loop is idle, then serves them in one batch."""

    def __init__(self) -> None:
        self.pending: list[tuple[GenRequest, asyncio.Future]] = []
        self.served = 0  # number of the wave whose results are being handed out

    def submit(self, req: GenRequest) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        self.pending.append((req, fut))
        return fut


class EpisodeTeam:
    """The `Team` handed to one episode: routes a role to its policy and records turns."""

    def __init__(self, episode: Episode, waves: _Waves, routes: Mapping[str, str],
                 max_new_tokens: Callable[[str], int]) -> None:
        self.episode, self.waves, self.routes, self.max_new_tokens = episode, waves, routes, max_new_tokens
        self.info: dict[str, Any] = episode.info

    async def call(self, role: str, messages: list[Message], *, slot: str | None = None) -> str:
        if role not in self.routes:
            raise KeyError(f"role {role!r} has no route; routed roles: {sorted(self.routes)}")
        policy = self.routes[role]
        index = len(self.episode.turns)
        turn = Turn(role=role, slot=slot or role, policy=policy, prompt_text="", completion_text="",
                    index=index)
        self.episode.turns.append(turn)  # reserve the position so turn order is call order
        out = await self.waves.submit(GenRequest(messages, policy, self.max_new_tokens(role)))
        turn.prompt_text, turn.completion_text = out.prompt_text, out.completion_text
        turn.prompt_ids, turn.completion_ids = out.prompt_ids, out.completion_ids
        turn.logprobs, turn.finish_reason = out.logprobs, out.finish_reason
        turn.wave = self.waves.served
        return out.completion_text


async def _settle(waves: _Waves, tasks: list[asyncio.Task]) -> None:
    # Workflows are pure Python between model calls, so a few idle loop passes with no
    # new call and no finished task mean every live episode is blocked on the engine.
    stable, seen = 0, (-1, -1)
    while stable < 2:
        await asyncio.sleep(0)
        now = (len(waves.pending), sum(t.done() for t in tasks))
        stable = stable + 1 if now == seen else 0
        seen = now


async def _run_all(workflow: Workflow, jobs: list[tuple[Problem, int]], engine: Engine,
                   routes: Mapping[str, str], max_new_tokens: Callable[[str], int],
                   temperature: float, on_wave: Callable[[int], None] | None) -> list[Episode]:
    waves = _Waves()
    episodes = [Episode(problem=p, sample=g) for p, g in jobs]

    async def one(ep: Episode) -> None:
        ep.final_answer = await workflow.run(ep.problem, EpisodeTeam(ep, waves, routes, max_new_tokens))

    tasks = [asyncio.create_task(one(ep)) for ep in episodes]
    try:
        while not all(t.done() for t in tasks):
            await _settle(waves, tasks)
            batch, waves.pending = waves.pending, []
            if not batch:
                continue
            outs = engine.generate([r for r, _ in batch], temperature=temperature)
            waves.served += 1
            for (_, fut), out in zip(batch, outs, strict=True):
                fut.set_result(out)
            if on_wave:
                on_wave(len(batch))
        for t in tasks:
            t.result()  # re-raise a workflow error with its own traceback
    finally:
        for t in tasks:
            t.cancel()
    return episodes


def rollout(workflow: Workflow, problems_P: list[Problem], group_size: int, engine: Engine,
            routes: Mapping[str, str], max_new_tokens: Callable[[str], int], temperature: float,
            on_wave: Callable[[int], None] | None = None) -> list[Episode]:
    """Episodes for every (problem, sample), ordered problem-major: index = p * G + g."""
    jobs = [(p, g) for p in problems_P for g in range(group_size)]
    return asyncio.run(_run_all(workflow, jobs, engine, routes, max_new_tokens, temperature, on_wave))
