"""`reward.name=reasoning_gym`: reasoning-gym's own `score_answer(answer, entry)`, in a killable
worker under a deadline.

The answer is taken as `reward.answer_from` says (`rolecall.parsing.final_answer`: the last
`\\boxed{}`, or a fallback); the entry is the one the task stored in `meta["entry"]`, and the
dataset whose `score_answer` judges it is rebuilt from `meta["gym"]` and `meta["gym_options"]`
in a worker process (`rolecall.rewards.reasoning_gym_worker`, one per dataset, started on first
use). The value is reasoning-gym's score (0 to 1; some datasets give partial credit); the status
is `ok` when it is 1, else `wrong`.

A call that overruns `reward.gym_deadline_s`, crashes the worker or raises in it is judged as
the math verifier judges its judge: a control follows on a fresh worker, under the same
deadline, scoring the entry's own gold answer. If the control answers in time, the answer was
at fault: status `pathological`, score 0 (so breaking the scorer is no escape from a negative
advantage). Otherwise the scorer or the entry is at fault: `unscorable` (value None).
"""
from __future__ import annotations

import json
import sys
import threading
from collections.abc import Sequence

from rolecall.parsing import final_answer
from rolecall.rewards.base import Score, VerifierSpec
from rolecall.rewards.worker import CRASHED, NO_WORKER, OVERRAN, RAISED, LineWorker, describe_failure
from rolecall.types import Problem

_STARTUP_S = 120.0  # importing reasoning-gym and building a dataset on a busy machine
WORKER = (sys.executable, "-m", "rolecall.rewards.reasoning_gym_worker")


class ReasoningGymVerifier:
    name = "reasoning_gym"

    def __init__(self, *, answer_from: str = "boxed", format_penalty: float = 0.0, deadline_s: float = 5.0,
                 worker_command: Sequence[str] | None = None) -> None:
        """`worker_command` replaces `python -m rolecall.rewards.reasoning_gym_worker` (the
        dataset's JSON is appended to it); tests use it to stand in a slow `score_answer`."""
        if deadline_s <= 0:
            raise ValueError(f"deadline_s must be > 0, got {deadline_s}")
        final_answer("", answer_from)  # an unknown setting fails here, not on the first answer
        self.answer_from, self.format_penalty, self.deadline_s = answer_from, format_penalty, deadline_s
        self._command = list(worker_command or WORKER)
        self._workers: dict[str, LineWorker] = {}
        self._lock = threading.Lock()

    def score_many(self, completions: list[str], problems: list[Problem]) -> list[Score]:
        return [self.score(c, p) for c, p in zip(completions, problems, strict=True)]

    def score(self, completion: str, problem: Problem) -> Score:
        entry, gym = problem.meta.get("entry"), problem.meta.get("gym")
        if not isinstance(entry, dict) or not gym:
            return Score(None, "unscorable", info={"reason": f"problem {problem.uid} has no reasoning-gym entry"})
        found = final_answer(completion, self.answer_from)
        via = {} if self.answer_from == "boxed" else {"extracted_from": found.source}
        if not found.text:
            return Score(0.0 - self.format_penalty, "no_answer", None, info=via)
        worker = self._worker(gym, problem.meta.get("gym_options") or {})
        value, failure = self._score(worker, found.text, entry)
        if value is not None:
            return Score(value, "ok" if value >= 1.0 else "wrong", found.text, info=via)
        what = self._describe(worker, failure, "this answer")
        if failure[0] not in (OVERRAN, CRASHED, RAISED):
            return Score(None, "unscorable", found.text, info={**via, "reason": what})
        control, control_failure = self._score(worker, entry.get("answer"), entry)
        if control is not None:
            return Score(0.0, "pathological", found.text,
                         info={**via, "reason": f"{what} (the gold answer scores in time)"})
        return Score(None, "unscorable", found.text, info={
            **via, "reason": f"{what}, and so did the control: "
                             f"{self._describe(worker, control_failure, 'the gold answer')}"})

    def _worker(self, gym: str, options: dict) -> LineWorker:
        spec = json.dumps({"gym": gym, "options": options}, sort_keys=True)
        with self._lock:
            if spec not in self._workers:
                self._workers[spec] = LineWorker([*self._command, spec], name=f"reasoning-gym {gym}",
                                                 startup_s=_STARTUP_S)
            return self._workers[spec]

    def _score(self, worker: LineWorker, answer, entry: dict) -> tuple[float | None, tuple[str, str]]:
        resp, failure = worker.request({"answer": answer, "entry": entry}, self.deadline_s)
        return (None, failure) if resp is None else (float(resp["score"]), failure)

    def _describe(self, worker: LineWorker, failure: tuple[str, str], subject: str) -> str:
        kind, detail = failure
        return describe_failure((kind, (worker.startup_error or detail) if kind == NO_WORKER else detail), subject,
                                deadline_s=self.deadline_s, doing="scoring", who="reasoning-gym's score_answer",
                                worker="the reasoning-gym worker")

    def close(self) -> None:
        with self._lock:
            for worker in self._workers.values():
                worker.close()


VERIFIER = VerifierSpec("reasoning_gym", lambda cfg: ReasoningGymVerifier(
    answer_from=cfg.answer_from, format_penalty=cfg.format_penalty, deadline_s=cfg.gym_deadline_s),
    reads_answer_from=True)
