"""Rollout: run P x G workflow episodes concurrently, batching every wave of LLM calls.

Each episode is an asyncio task. When every live task is waiting on a model call, the
pending calls form one *wave*: a single `engine.generate` over all of them (mixed
policies in one batch). Results resume the tasks, which issue the next wave, and so on.

Episode wall-clock budget (`episode_timeout_s`): at every wave boundary, an episode that
has run longer than its budget since it started is cut: its task is cancelled, its pending
model calls are not sent (their reserved turns are dropped; completed turns stay), and it
is marked `timed_out` with its `elapsed_s`. Its final answer stays ""
(the workflow never returned one), so it is scored like any answerless episode (a
`no_answer` reward) rather than excluded: running out of time is the policy's behaviour,
like a token-budget truncation. The rest of the batch proceeds. An episode that gets its
last reply after the budget but needs no further call still finishes normally. Time spent
waiting for a wave counts, since the episode is waiting on it. Only cooperative code can be
cut: a workflow looping between awaits (`await asyncio.sleep(0)`) is, but one blocking the
event loop without awaiting (a pure CPU loop) cannot be interrupted in-process.

`await team.check(text)` grades a text with the run's verifier *during* the episode (a
debate showing each agent its peers' scores): checks are batched like model calls, one
`check(texts, problems)` per wave, served before that wave's generation.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import time
from typing import Any, Callable, Mapping, Sequence

from rolecall.engines.base import Engine, GenRequest
from rolecall.types import Episode, Problem, Reply, Turn
from rolecall.workflows.base import Message, Workflow, WorkflowError, describe_failure

# Grades texts against their problems now: a value per text, None where unscorable.
Check = Callable[[Sequence[str], Sequence[Problem]], list[float | None]]


class _Waves:
    """Collects model calls until the event loop is idle, then serves them in one batch."""

    def __init__(self) -> None:
        self.pending: list[tuple[GenRequest, asyncio.Future, Episode]] = []
        self.checks: list[tuple[str, asyncio.Future, Episode]] = []
        self.served = 0  # number of the wave whose results are being handed out

    def submit(self, req: GenRequest, episode: Episode) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        self.pending.append((req, fut, episode))
        return fut

    def submit_check(self, text: str, episode: Episode) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        self.checks.append((text, fut, episode))
        return fut

    def serve_checks(self, check: Check | None) -> None:
        live = [(t, f, ep) for t, f, ep in self.checks if not (f.cancelled() or ep.timed_out)]
        self.checks = []
        if not live:
            return
        if check is None:
            err = RuntimeError("team.check: this rollout has no verifier to check with")
            for _, fut, _ in live:
                fut.set_exception(err)
            return
        values = check([t for t, _, _ in live], [ep.problem for _, _, ep in live])
        for (_, fut, _), v in zip(live, values, strict=True):
            fut.set_result(v)


class EpisodeTeam:
    """The `Team` handed to one episode: routes a role to its policy and records turns."""

    def __init__(self, episode: Episode, waves: _Waves, routes: Mapping[str, str],
                 max_new_tokens: Callable[[str], int], training: bool = False, seed: int | None = None) -> None:
        self.episode, self.waves, self.routes, self.max_new_tokens = episode, waves, routes, max_new_tokens
        self.info: dict[str, Any] = episode.info
        self.training = training
        self.seed = seed  # the episode's sampling seed; each call derives its own from it

    async def call(self, role: str, messages: list[Message], *, slot: str | None = None) -> Reply:
        if role not in self.routes:
            raise KeyError(f"role {role!r} has no route; routed roles: {sorted(self.routes)}")
        messages = _checked_copy(messages, role)  # the request must not change if the caller's list does
        policy = self.routes[role]
        index = len(self.episode.turns)
        turn = Turn(role=role, slot=slot or role, policy=policy, prompt_text="", completion_text="",
                    index=index)
        self.episode.turns.append(turn)  # reserve the position so turn order is call order
        try:
            seed = None if self.seed is None else _derive(self.seed, index)
            out = await self.waves.submit(GenRequest(messages, policy, self.max_new_tokens(role), seed), self.episode)
        except asyncio.CancelledError:  # the episode ran out of time: this turn never happened
            self.episode.turns.remove(turn)
            raise
        turn.prompt_text, turn.completion_text = out.prompt_text, out.completion_text
        turn.prompt_ids, turn.completion_ids = out.prompt_ids, out.completion_ids
        turn.logprobs, turn.finish_reason = out.logprobs, out.finish_reason
        turn.wave = self.waves.served
        return Reply(out.completion_text, index)

    async def check(self, text: str) -> float | None:
        if not isinstance(text, str):
            raise TypeError(f"team.check: expected the text to check, got {type(text).__name__}")
        return await self.waves.submit_check(str(text), self.episode)

    def grade(self, text: str, name: str = "graded", *, reward: bool = False) -> None:
        if not isinstance(text, str):
            raise TypeError(f"team.grade: expected the text to grade, got {type(text).__name__}")
        if reward and not isinstance(text, Reply):
            raise TypeError("team.grade(..., reward=True) needs a reply of team.call (it names the turn to reward)")
        self.episode.graded.setdefault(name, []).append(str(text))
        self.episode.graded_turns.setdefault(name, []).append(text.turn if reward else None)

    def reward(self, reply: Reply, value: float | None) -> None:
        if not isinstance(reply, Reply):
            raise TypeError("team.reward: expected a reply of team.call (it names the turn to reward)")
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise TypeError(f"team.reward: the reward must be a number or None, got {value!r}")
        self.episode.set_rewards[reply.turn] = None if value is None else float(value)


def _derive(*parts: object) -> int:
    """A 63-bit seed from its parts, the same in every process (unlike hash())."""
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def _checked_copy(messages: list[Message], role: str) -> list[Message]:
    """A copy of a chat (list of {"role", "content"} with text content), or a TypeError naming the role."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise TypeError(f"team.call({role!r}, ...): messages must be a non-empty list of "
                        f"{{'role': ..., 'content': ...}}, got {type(messages).__name__}")
    for i, m in enumerate(messages):
        if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
            raise TypeError(f"team.call({role!r}, ...): message {i} must be {{'role': str, 'content': str}}, got {m!r:.80}")
    return [dict(m) for m in messages]


async def _settle(waves: _Waves, tasks: list[asyncio.Task]) -> None:
    # Workflows are pure Python between model calls, so a few idle loop passes with no
    # new call and no finished task mean every live episode is blocked on the engine.
    stable, seen = 0, (-1, -1, -1)
    while stable < 2:
        await asyncio.sleep(0)
        now = (len(waves.pending), len(waves.checks), sum(t.done() for t in tasks))
        stable = stable + 1 if now == seen else 0
        seen = now


async def _run_all(workflow: Workflow, jobs: list[tuple[Problem, int, int]], engine: Engine,
                   routes: Mapping[str, str], max_new_tokens: Callable[[str], int],
                   temperature: float, on_wave: Callable[[int], None] | None,
                   episode_timeout_s: float | None, check: Check | None, training: bool,
                   seed: int | None = None) -> list[Episode]:
    waves = _Waves()
    episodes = [Episode(problem=p, sample=g, group=k) for p, g, k in jobs]
    started: dict[int, float] = {}  # episode index -> monotonic start time

    async def one(i: int, ep: Episode) -> None:
        started[i] = time.monotonic()
        try:
            ep_seed = None if seed is None else _derive(seed, ep.group, ep.problem.uid, ep.sample)
            final = await workflow.run(ep.problem, EpisodeTeam(ep, waves, routes, max_new_tokens, training, ep_seed))
            if not isinstance(final, str):
                raise TypeError(f"run() must return the final answer text, got {type(final).__name__}")
        except (asyncio.CancelledError, WorkflowError):
            raise
        except Exception as e:  # noqa: BLE001 - any bug in workflow code: name it, keep the cause chained
            raise WorkflowError(describe_failure(workflow.name, ep.problem.uid, e)) from e
        ep.final_answer = str(final)

    tasks = [asyncio.create_task(one(i, ep)) for i, ep in enumerate(episodes)]
    try:
        while not all(t.done() for t in tasks):
            await _settle(waves, tasks)
            if episode_timeout_s is not None:
                _cut_overdue(tasks, episodes, started, episode_timeout_s)
            waves.serve_checks(check)
            batch = [(r, f) for r, f, ep in waves.pending if not (f.cancelled() or ep.timed_out)]
            waves.pending = []
            if not batch:
                continue
            outs = engine.generate([r for r, _ in batch], temperature=temperature)
            waves.served += 1
            for (_, fut), out in zip(batch, outs, strict=True):
                fut.set_result(out)
            if on_wave:
                on_wave(len(batch))
        for t in tasks:
            if not t.cancelled():  # cancelled = cut by the time budget, already marked
                t.result()  # re-raise a workflow error (its cause keeps the original traceback)
    finally:
        for t in tasks:
            t.cancel()
    return episodes


def _cut_overdue(tasks: list[asyncio.Task], episodes: list[Episode], started: dict[int, float],
                 budget_s: float) -> None:
    """Cancel every live episode that has run longer than `budget_s`, and mark it."""
    now = time.monotonic()
    for i, (task, ep) in enumerate(zip(tasks, episodes)):
        if i in started and not task.done() and now - started[i] > budget_s:
            task.cancel()
            ep.timed_out, ep.elapsed_s = True, round(now - started[i], 3)


class _Replays:
    """Looks like a workflow to `_run_all`: its k-th episode replays job k (an episode and one of its
    turns) through `Workflow.replay`."""

    def __init__(self, workflow: Workflow, jobs: list[tuple[Episode, int]]) -> None:
        self.workflow, self.jobs, self.name = workflow, jobs, workflow.name

    async def run(self, problem: Problem, team: EpisodeTeam) -> str:
        episode, turn = self.jobs[team.episode.group]
        answer = await self.workflow.replay(episode, turn, team)
        return "" if answer is None else answer


def replay(workflow: Workflow, jobs: list[tuple[Episode, int]], engine: Engine, routes: Mapping[str, str],
           max_new_tokens: Callable[[str], int], temperature: float, seed: int | None = None) -> list[Episode]:
    """One counterfactual episode per (episode, turn) job: the workflow's `replay` of that turn with its
    calls batched in waves as a rollout's are. Each returned episode holds the replay's own turns (its
    cost) and, as `final_answer`, the answer the original would have reached."""
    jobs_run = [(ep.problem, 0, k) for k, (ep, _) in enumerate(jobs)]
    return _blocking(lambda: asyncio.run(_run_all(_Replays(workflow, jobs), jobs_run, engine, routes,  # type: ignore[arg-type]
                                                  max_new_tokens, temperature, None, None, None, True, seed)))


def rollout(workflow: Workflow, problems_P: list[Problem], group_size: int, engine: Engine,
            routes: Mapping[str, str], max_new_tokens: Callable[[str], int], temperature: float,
            on_wave: Callable[[int], None] | None = None,
            episode_timeout_s: float | None = None, check: Check | None = None,
            training: bool = False, seed: int | None = None, first_group: int = 0) -> list[Episode]:
    """Episodes for every (problem, sample), ordered problem-major: index = p * G + g.

    `episode_timeout_s` is each episode's wall-clock budget; `check` serves `team.check`
    (see the module docstring); `training` is what `team.training` tells the workflow
    (False for validation and evaluation). `seed` gives every model call its own sampling
    seed, derived from (seed, draw, problem, sample, turn): the episodes are then the same
    however the calls are batched, split or spread over workers (engines that honour
    `GenRequest.seed`); without it, sampling follows torch's global generator. `first_group`
    is the draw index of the first problem: a worker given a share of a step keeps the
    step's numbering, so its episodes (and seeds) are those of an in-process rollout.
    """
    jobs = [(p, g, first_group + k) for k, p in enumerate(problems_P) for g in range(group_size)]
    return _blocking(lambda: asyncio.run(_run_all(workflow, jobs, engine, routes, max_new_tokens, temperature,
                                                  on_wave, episode_timeout_s, check, training, seed)))


def _blocking(run: Callable[[], list[Episode]]) -> list[Episode]:
    """`run()` (which starts an event loop) from synchronous code, also when called inside one."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return run()
    # Called from inside a running event loop (a notebook, an async application): that loop
    # cannot run another, so the rollout gets its own loop on a helper thread, and this call
    # blocks like any other training call does.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="rolecall-rollout") as pool:
        return pool.submit(run).result()
