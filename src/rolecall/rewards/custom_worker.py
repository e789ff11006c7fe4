"""Child side of `CustomVerifier`: a user's reward function, one JSON line per request.

Run as `python -m rolecall.rewards.custom_worker package.module:name`. `name` is a function
`(problem, answer) -> score`, or `(problem, answer, episode) -> score` to see the whole
episode (every turn's role and text), or a class whose instance (made once, without
arguments) is called the same way. A score is a number (a bool counts as 1 or 0), None
("cannot score this": the sample leaves the group statistics, counted as unscorable) or a
`rolecall.rewards.Score`; anything else is answered as `{"bad_value": why}`. The parent checks
that a number is finite and within `reward.custom_max_abs`.

Isolation: before the user's module is imported, the protocol moves off file descriptors 0 and 1
(to private, non-inheritable duplicates); fd 0 becomes /dev/null and fd 1 joins fd 2, the pipe
the parent copies into the reward's log. So whatever the function, its libraries or the programs
it starts print, on stdout or stderr, lands in the log and never in the protocol, and nothing
they run can read the requests.
Protocol: requests `{"id", "problem": {uid, prompt, answer, meta}, "answer", "episode"?}` ->
`{"id", "value", "status", "extracted", "info"}`, `{"id", "bad_value": str}` or `{"id", "error": str}`
(the traceback goes to the log); first `{"ready": true, "episode": bool}` (whether the function
takes the episode). A failure to import prints its traceback and then one line on stderr, and
exits 1 (the parent names the line).
"""
from __future__ import annotations

import faulthandler
import importlib
import inspect
import json
import numbers
import os
import sys
import traceback

from rolecall.rewards.base import Score
from rolecall.rewards.processes import become_subreaper
from rolecall.types import Episode, Problem, Turn


def load(target: str):
    """The callable `module:name` names (a class is instantiated once); raises with what is wrong."""
    module, sep, attr = target.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"expected 'package.module:function', got {target!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())  # a module next to the user, as `python -m` would find it
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if inspect.isclass(obj):
        obj = obj()
    if not callable(obj):
        raise TypeError(f"{target} is a {type(obj).__name__}, not a function or a class with __call__")
    return obj


def wants_episode(fn) -> bool:
    """Whether `fn` takes the episode: a parameter named `episode`, or a third positional one."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    if any(p.name == "episode" for p in params):
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 3 or any(p.kind == p.VAR_POSITIONAL for p in params)


def episode_of(problem, view: dict):
    """The episode the parent sent, as rolecall's own `Episode` (texts only, no token ids)."""

    turns = [Turn(role=t["role"], slot=t["slot"], policy=t["policy"], prompt_text=t["prompt"],
                  completion_text=t["completion"], index=t["index"], finish_reason=t["finish_reason"])
             for t in view["turns"]]
    return Episode(problem=problem, sample=view["sample"], turns=turns, final_answer=view["final_answer"],
                   info=view.get("info") or {}, group=view.get("group", 0))


class BadValue(Exception):
    """The function returned something that is not a score."""


def number(x, what: str = "returned") -> float:
    """`x` as a float, or BadValue naming what it is. Any real number counts (a bool is 1 or 0,
    numpy scalars too); a string, a list, a tensor or an integer too large for a float does not."""
    if isinstance(x, numbers.Real):
        try:
            return float(x)
        except (OverflowError, ValueError, TypeError) as e:
            raise BadValue(f"{what} {type(x).__name__} {_short(x)} ({e})") from None
    raise BadValue(f"{what} {type(x).__name__} {_short(x)}")


def _short(x) -> str:
    text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."


def answer(fn, req: dict) -> dict:
    p = req["problem"]
    problem = Problem(p["uid"], p["prompt"], p["answer"], p.get("meta") or {})
    if "episode" in req:
        out = fn(problem, req["answer"], episode_of(problem, req["episode"]))
    else:
        out = fn(problem, req["answer"])
    try:
        if isinstance(out, Score):
            value = None if out.value is None else number(out.value, "returned a Score whose value is")
            return {"value": value, "status": str(out.status), "extracted": out.extracted, "info": dict(out.info or {})}
        if out is None:
            return {"value": None, "status": "unscorable", "info": {"reason": "the reward function returned None"}}
        return {"value": number(out), "status": "ok"}
    except BadValue as e:
        return {"bad_value": str(e)}


def isolate():
    """(requests, replies): the protocol on private descriptors; fds 0, 1 and 2 left to the user's code."""
    requests = os.fdopen(os.dup(0), "r", encoding="utf-8")  # os.dup: not inherited by programs it starts
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)  # stdout joins stderr: the reward's log
    sys.stdout.reconfigure(line_buffering=True)  # a crash loses no printed line
    sys.stderr.reconfigure(line_buffering=True)
    return requests, replies


def main() -> None:
    become_subreaper()  # what the reward starts, detached or not, stays below this process and dies with it
    requests, replies = isolate()
    faulthandler.enable()  # a crash in native code leaves its Python stack in the log
    try:
        fn = load(sys.argv[1])
    except BaseException as e:  # noqa: BLE001 - the parent reports it, naming the import path
        traceback.print_exc()
        print(f"{type(e).__name__}: {e}", file=sys.stderr, flush=True)
        sys.exit(1)
    replies.write(json.dumps({"ready": True, "episode": wants_episode(fn), "pid": os.getpid()}) + "\n")
    replies.flush()
    for line in requests:
        if not line.strip():
            continue
        req = json.loads(line)
        try:
            resp = {"id": req["id"], **answer(fn, req)}
            text = json.dumps(resp, default=str)
        except Exception as e:  # noqa: BLE001 - one bad sample, not a dead worker
            traceback.print_exc()  # the whole story to the log; the parent gets one line
            where = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
            at = f" (at {where.filename}:{where.lineno})" if where else ""
            text = json.dumps({"id": req["id"], "error": f"{type(e).__name__}: {e}{at}"})
        replies.write(text + "\n")
        replies.flush()


if __name__ == "__main__":
    main()
