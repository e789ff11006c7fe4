"""A user's reward function as a verifier: `reward.name: package.module:function`.

The function gets the problem and the final answer, and the whole episode too (every turn's
role and text) if it takes a third parameter, `episode`. It runs in child processes
(`custom_worker`), isolated from the trainer:

- **Output.** Everything the function, its libraries and the programs it starts print (stdout
  and stderr alike) goes to the reward's log: a temporary file until the run directory exists
  (`log_to`), then `<run>/reward.log`. The protocol has its own file descriptors.
- **Time.** The calls of one `score_many` batch run at once on `reward.custom_workers` processes,
  each under `reward.custom_deadline_s`. A call that overruns it is unscorable (status
  `timeout`) and its process (with whatever it started) is killed and replaced. Once
  `give_up_after(workers)` calls of a batch in a row have overrun, the rest of that batch is
  not tried (status `timeout` too): a reward that hangs on everything costs about two
  deadlines per batch, not one per sample.
- **Failures.** A call that raises (`raised`), kills its process (`crashed`), or returns
  something that is not a finite number within `reward.custom_max_abs` (`bad_value`: NaN,
  inf, 1e308, a string...) makes that sample unscorable, never 0: it leaves the group statistics
  and validation accuracy. The first failure of each kind leaves a one-line notice
  (`drain_notices`) naming the reward, what happened and where the log is.

A function that cannot be imported fails when the run starts, naming the import path.
"""
from __future__ import annotations

import importlib.util
import math
import os
import signal
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from rolecall.rewards.base import Score
from rolecall.rewards.reward_log import LOG_NAME, RewardLog
from rolecall.rewards.worker import CRASHED, NO_WORKER, OVERRAN, RAISED, LineWorker
from rolecall.types import Episode, Problem

# Statuses of a sample the reward function could not score (value None).
TIMEOUT, RAISED_STATUS, CRASHED_STATUS, BAD_VALUE = "timeout", "raised", "crashed", "bad_value"
MAX_ABS_LIMIT = 1e12  # the largest `reward.custom_max_abs`: any sum or variance of such rewards stays finite


def give_up_after(workers: int) -> int:
    """Timeouts in a row, within one batch, after which the batch's untried calls are not tried."""
    return max(8, 2 * workers)


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
    workers: int = 4
    max_abs: float = 1e6
    name: str = ""
    _pool: list[LineWorker] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.name = self.target
        self.workers = max(1, int(self.workers))
        self.log = RewardLog()
        self._notices: list[str] = []
        self._said: set[str] = set()
        self._lock = threading.Lock()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (os.getcwd(), os.environ.get("PYTHONPATH", "")) if p)}
        self._pool = [LineWorker([sys.executable, "-m", "rolecall.rewards.custom_worker", self.target],
                                 name=f"reward {self.target}", startup_s=120.0, env=env, keep_on_error=True,
                                 on_output=lambda chunk, i=i: self.log.output(i, chunk))
                      for i in range(1, self.workers + 1)]
        try:  # start one now: a function that cannot be imported fails before any model loads
            self._pool[0].start()
        except OSError as e:
            why = self._pool[0].startup_error or str(e)
            printed = self.log.has_output() and self.log.tail(1) != [why]
            self.log.close(keep=printed)
            where = f" (traceback and output: {self.log.path})" if printed else ""
            raise ValueError(f"reward.name: cannot load {self.target!r}: {why}{where}") from None
        self.log.event(f"reward {self.target}: worker 1 (pid {self._pool[0].pid}) started; "
                       f"deadline {self.deadline_s:g} s per call, up to {self.workers} calls at once")

    @property
    def wants_episode(self) -> bool:
        """True when the function takes the episode: final answers are then scored episode by episode."""
        return bool(self._pool[0].ready_info.get("episode"))

    def log_to(self, run_dir: Path) -> Path:
        """Continue the log as `run_dir/reward.log` (what was written so far is moved there)."""
        self.log.move_to(Path(run_dir) / LOG_NAME)
        return self.log.path

    def drain_notices(self) -> list[str]:
        """The notices since the last call, oldest first: the first timeout, raise, crash and bad value."""
        with self._lock:
            out, self._notices = self._notices, []
        return out

    def score_many(self, completions: list[str], problems: list[Problem],
                   episodes: list[Episode] | None = None) -> list[Score]:
        views = [None] * len(completions) if episodes is None or not self.wants_episode else [_view(e) for e in episodes]
        requests = [_request(c, p, v) for c, p, v in zip(completions, problems, views, strict=True)]
        return self._run(requests)

    def close(self) -> None:
        for w in self._pool:
            w.close()
        self.log.close(keep=bool(self._said))

    # -- the batch ----------------------------------------------------------------------------------

    def _run(self, requests: list[dict]) -> list[Score]:
        out: list[Score | None] = [None] * len(requests)
        n_workers = min(self.workers, len(requests))
        batch = _Batch(len(requests), give_up_after(n_workers))

        def work(w: int) -> None:
            while (i := batch.take()) is not None:
                try:
                    out[i] = self._one(w, requests[i])
                except Exception as e:  # noqa: BLE001 - a fault here must not lose the batch's other scores
                    out[i] = Score(None, "unscorable", info={"reason": f"rolecall could not score it: "
                                                                       f"{type(e).__name__}: {e}"})
                batch.done(out[i].status == TIMEOUT)

        if n_workers <= 1:
            if requests:
                work(0)
        else:
            threads = [threading.Thread(target=work, args=(w,), daemon=True) for w in range(n_workers)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        if batch.untried:
            reason = (f"not tried: the {batch.streak} calls before it in this batch overran the "
                      f"{self.deadline_s:g} s deadline")
            self.log.event(f"{len(batch.untried)} calls of this batch not tried ({reason.removeprefix('not tried: ')})")
            for i in batch.untried:
                out[i] = Score(None, TIMEOUT, info={"reason": reason})
        return out  # type: ignore[return-value] - every slot is filled

    def _one(self, w: int, req: dict) -> Score:
        worker, number = self._pool[w], w + 1
        self.log.forget_tail(number)
        resp, (kind, detail) = worker.request(req, self.deadline_s)
        uid = req["problem"]["uid"]
        if resp is not None:
            if "bad_value" in resp:
                return self._bad_value(uid, f"{resp['bad_value']}")
            value, status = resp.get("value"), resp.get("status")
            if value is None:
                return Score(None, status or "unscorable", resp.get("extracted"), resp.get("info") or {})
            why = _out_of_range(value, self.max_abs)
            if why:
                return self._bad_value(uid, why)
            return Score(float(value), status or "ok", resp.get("extracted"), resp.get("info") or {})
        if kind == OVERRAN:
            reason = f"the reward function overran its {self.deadline_s:g} s deadline"
            self.log.event(f"problem {uid}: {reason}; worker {number} and what it started were killed "
                           "(a fresh one takes the next call)")
            self._notice(TIMEOUT, f"reward {self.target}: a call overran its {self.deadline_s:g} s deadline "
                                  f"(reward.custom_deadline_s) on problem {uid}; such samples are unscorable "
                                  f"(status {TIMEOUT}) and the worker is replaced. Its output: {self.log.path}")
            return Score(None, TIMEOUT, info={"reason": reason})
        if kind == RAISED:
            reason = f"the reward function failed: {detail}"
            self.log.event(f"problem {uid}: {reason} (traceback above)")
            self._notice(RAISED_STATUS, f"reward {self.target} raised on problem {uid}: {detail}; such samples "
                                        f"are unscorable (status {RAISED_STATUS}). Traceback in {self.log.path}")
            return Score(None, RAISED_STATUS, info={"reason": reason})
        if kind == NO_WORKER:
            died = f"could not start a worker ({worker.startup_error or detail})"
            reason = f"the reward function {died}"
        elif kind == CRASHED:
            died = "its process died" + _exit_text(worker.last_exit) + (f" ({detail})" if detail else "")
            reason = f"the reward function's {died.removeprefix('its ')}"
        else:  # OUT_OF_STEP: the protocol has its own descriptors, so only a rolecall bug gets here
            died = f"its worker failed ({kind})"
            reason = f"the reward function's {died.removeprefix('its ')}"
        self.log.event(f"problem {uid}: worker {number}: {died}")
        tail = self.log.tail(number)
        shown = "".join(f"\n  | {line}" for line in tail) if tail else " (it printed nothing)"
        self._notice(CRASHED_STATUS, f"reward {self.target}: {died} on problem {uid}; such samples are unscorable "
                                     f"(status {CRASHED_STATUS}) and the worker is replaced. Last output, "
                                     f"in {self.log.path}:{shown}")
        return Score(None, CRASHED_STATUS, info={"reason": reason})

    def _bad_value(self, uid: str, why: str) -> Score:
        reason = (f"the reward function {why}; a reward must be a finite number with "
                  f"|value| <= {self.max_abs:g} (reward.custom_max_abs), None or a Score")
        self.log.event(f"problem {uid}: {reason}")
        self._notice(BAD_VALUE, f"reward {self.target} {why} on problem {uid}: not a finite number within "
                                f"±{self.max_abs:g} (reward.custom_max_abs); such samples are unscorable "
                                f"(status {BAD_VALUE}). Log: {self.log.path}")
        return Score(None, BAD_VALUE, info={"reason": reason})

    def _notice(self, kind: str, text: str) -> None:
        with self._lock:
            if kind not in self._said:
                self._said.add(kind)
                self._notices.append(text)


class _Batch:
    """Hands out a batch's calls to the workers; stops handing out after `limit` timeouts in a row."""

    def __init__(self, n: int, limit: int) -> None:
        self._next, self.n, self.limit = 0, n, limit
        self.streak = 0
        self.untried: list[int] = []
        self._lock = threading.Lock()

    def take(self) -> int | None:
        with self._lock:
            if self._next >= self.n:
                return None
            if self.streak >= self.limit:
                self.untried = list(range(self._next, self.n))
                self._next = self.n
                return None
            self._next += 1
            return self._next - 1

    def done(self, timed_out: bool) -> None:
        with self._lock:
            self.streak = self.streak + 1 if timed_out else 0


def _request(completion: str, problem: Problem, episode: dict | None) -> dict:
    req = {"problem": {"uid": problem.uid, "prompt": problem.prompt, "answer": problem.answer,
                       "meta": problem.meta}, "answer": completion}
    if episode is not None:
        req["episode"] = episode
    return req


def _out_of_range(value, max_abs: float) -> str | None:
    """Why `value` (as the worker sent it) is no reward, or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"returned {type(value).__name__} {value!r:.60}"
    try:
        f = float(value)
    except OverflowError:
        return f"returned {value!r:.60}"
    if not math.isfinite(f) or abs(f) > max_abs:
        return f"returned {f!r}"
    return None


def _exit_text(code: int | None) -> str:
    if code is None:
        return ""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f" (killed by {name}{', perhaps out of memory' if code == -9 else ''})"
    return f" (exit code {code})"


def _view(ep: Episode) -> dict:
    """What a reward function sees of an episode: every turn's role, slot, policy and texts."""
    return {"sample": ep.sample, "group": ep.group, "final_answer": ep.final_answer,
            "turns": [{"role": t.role, "slot": t.slot, "policy": t.policy, "prompt": t.prompt_text,
                       "completion": t.completion_text, "index": t.index, "finish_reason": t.finish_reason}
                      for t in ep.turns],
            "info": {k: v for k, v in ep.facts().items() if isinstance(v, (str, int, float, bool, type(None)))}}
