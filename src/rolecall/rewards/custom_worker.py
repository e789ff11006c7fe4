"""Child side of `CustomVerifier`: a user's reward function, one JSON line per request.

Run as `python -m rolecall.rewards.custom_worker package.module:name`. `name` is a function
`(problem, answer) -> score`, or `(problem, answer, episode) -> score` to see the whole
episode (every turn's role and text), or a class whose instance (made once, without
arguments) is called the same way. A score is a number, None ("cannot score this": the sample leaves the
group statistics, counted as unscorable) or a `rolecall.rewards.Score`.
Protocol: stdin `{"id", "problem": {uid, prompt, answer, meta}, "answer", "episode"?}` -> stdout
`{"id", "value", "status", "extracted", "info"}` or `{"id", "error"}`; first
`{"ready": true, "episode": bool}` (whether the function takes the episode).
A failure to import prints one line on stderr and exits 1 (the parent names it).
"""
from __future__ import annotations

import importlib
import inspect
import json
import os
import sys
import traceback
from rolecall.rewards.base import Score
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


def answer(fn, req: dict) -> dict:
    p = req["problem"]
    problem = Problem(p["uid"], p["prompt"], p["answer"], p.get("meta") or {})
    if "episode" in req:
        out = fn(problem, req["answer"], episode_of(problem, req["episode"]))
    else:
        out = fn(problem, req["answer"])
    if isinstance(out, Score):
        return {"value": out.value, "status": out.status, "extracted": out.extracted, "info": dict(out.info)}
    if out is None:
        return {"value": None, "status": "unscorable", "info": {"reason": "the reward function returned None"}}
    if isinstance(out, bool) or isinstance(out, (int, float)):
        return {"value": float(out), "status": "ok"}
    raise TypeError(f"the reward function returned {type(out).__name__} {out!r:.60}; "
                    "expected a number, None (cannot score) or a rolecall.rewards.Score")


def main() -> None:
    try:
        fn = load(sys.argv[1])
    except BaseException as e:  # noqa: BLE001 - the parent reports it, naming the import path
        print(f"{type(e).__name__}: {e}", file=sys.stderr, flush=True)
        sys.exit(1)
    out = sys.stdout
    sys.stdout = sys.stderr  # a print() in the user's function must not break the protocol
    out.write(json.dumps({"ready": True, "episode": wants_episode(fn)}) + "\n")
    out.flush()
    for line in sys.stdin:
        req = json.loads(line)
        try:
            resp = {"id": req["id"], **answer(fn, req)}
            text = json.dumps(resp, default=str)
        except Exception as e:  # noqa: BLE001 - one bad sample, not a dead worker
            where = traceback.extract_tb(e.__traceback__)[-1]
            text = json.dumps({"id": req["id"], "error": f"{type(e).__name__}: {e} (at {where.filename}:{where.lineno})"})
        out.write(text + "\n")
        out.flush()


if __name__ == "__main__":
    main()
