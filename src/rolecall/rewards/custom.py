"""A user's reward function as a verifier: `reward.name: package.module:function`.

The function gets the problem and the final answer, and the whole episode too (every turn's
role and text) if it takes a third parameter, `episode`. It runs in a child process (`custom_worker`) under the same rules as the built-in
verifiers: each call has a deadline (`reward.custom_deadline_s`); a call that overruns it,
raises, crashes its process or returns something that is not a score makes that sample
unscorable (excluded from the group statistics and counted as `reward/status_unscorable`),
never 0. The next call starts a fresh process. A function that cannot be imported fails when
the run starts, naming the import path.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass, field

from rolecall.rewards.base import Score
from rolecall.rewards.worker import CRASHED, OVERRAN, RAISED, LineWorker
from rolecall.types import Episode, Problem


def module_source(name: str) -> str | None:
    """The file `package.module:function` is defined in, if it can be found without running it."""
    module = name.partition(":")[0]
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    if spec is None and os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            spec = None
    return getattr(spec, "origin", None) if spec is not None else None


@dataclass
class CustomVerifier:
    target: str
    deadline_s: float = 10.0
    name: str = ""
    _worker: LineWorker = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.name = self.target
        self._worker = LineWorker([sys.executable, "-m", "rolecall.rewards.custom_worker", self.target],
                                  name=f"reward {self.target}", startup_s=120.0,
                                  env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                      p for p in (os.getcwd(), os.environ.get("PYTHONPATH", "")) if p)})
        try:  # start now: a function that cannot be imported fails before any model loads
            self._worker.start()
        except OSError as e:
            raise ValueError(f"reward.name: cannot load {self.target!r}: "
                             f"{self._worker.startup_error or e}") from None

    @property
    def wants_episode(self) -> bool:
        """True when the function takes the episode: final answers are then scored episode by episode."""
        return bool(self._worker.ready_info.get("episode"))

    def score_many(self, completions: list[str], problems: list[Problem],
                   episodes: list[Episode] | None = None) -> list[Score]:
        views = [None] * len(completions) if episodes is None or not self.wants_episode else [_view(e) for e in episodes]
        return [self._one(c, p, v) for c, p, v in zip(completions, problems, views, strict=True)]

    def _one(self, completion: str, problem: Problem, episode: dict | None = None) -> Score:
        req = {"problem": {"uid": problem.uid, "prompt": problem.prompt, "answer": problem.answer,
                           "meta": problem.meta}, "answer": completion}
        if episode is not None:
            req["episode"] = episode
        resp, (kind, detail) = self._worker.request(req, self.deadline_s)
        if resp is not None:
            value = resp.get("value")
            status = resp.get("status") or ("unscorable" if value is None else "ok")
            return Score(None if value is None else float(value), status, resp.get("extracted"), resp.get("info") or {})
        reason = {OVERRAN: f"the reward function overran its {self.deadline_s:g} s deadline",
                  CRASHED: "the reward function's process died" + (f" ({detail})" if detail else ""),
                  RAISED: f"the reward function failed: {detail}"}.get(kind, f"the reward function's worker failed ({kind} {detail})".strip())
        return Score(None, "unscorable", info={"reason": reason})

    def close(self) -> None:
        self._worker.close()


def _view(ep: Episode) -> dict:
    """What a reward function sees of an episode: every turn's role, slot, policy and texts."""
    return {"sample": ep.sample, "group": ep.group, "final_answer": ep.final_answer,
            "turns": [{"role": t.role, "slot": t.slot, "policy": t.policy, "prompt": t.prompt_text,
                       "completion": t.completion_text, "index": t.index, "finish_reason": t.finish_reason}
                      for t in ep.turns],
            "info": {k: v for k, v in ep.facts().items() if isinstance(v, (str, int, float, bool, type(None)))}}
