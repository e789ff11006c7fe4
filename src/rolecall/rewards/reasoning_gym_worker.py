"""Child side of `ReasoningGymVerifier`: reasoning-gym's own `score_answer`, one JSON line per request.

Run as `python -m rolecall.rewards.reasoning_gym_worker '{"gym": ..., "options": {...}}'`. It
builds that reasoning-gym dataset once (before it says it is ready, so building never counts
against a request's deadline) and answers `{"id", "answer", "entry"}` with
`{"id", "score": float}`, or `{"id", "error": str}` when `score_answer` raises or returns no
number. The parent enforces the deadline by killing this process (no signals here: a
`score_answer` that spins is simply killed). A failure to build prints one line on stderr and
exits 1 (the parent names it).
"""
from __future__ import annotations

import json
import math
import sys


def build(spec: dict):
    """The dataset `spec` names, built as rolecall's task built it (seed and size do not matter
    to scoring, so the smallest dataset is built)."""
    import reasoning_gym  # only in this child: the trainer never imports reasoning-gym to score

    return reasoning_gym.create_dataset(spec["gym"], **spec.get("options", {}), seed=0, size=1)


def score(dataset, req: dict) -> dict:
    value = dataset.score_answer(req["answer"], req["entry"])
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TypeError(f"score_answer returned {value!r:.60}, not a finite number")
    return {"score": float(value)}


def main() -> None:
    try:
        dataset = build(json.loads(sys.argv[1]))
    except BaseException as e:  # noqa: BLE001 - the parent reports it
        print(f"{type(e).__name__}: {e}", file=sys.stderr, flush=True)
        sys.exit(1)
    out = sys.stdout
    sys.stdout = sys.stderr  # a print() inside reasoning-gym must not break the protocol
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        req = json.loads(line)
        try:
            resp = {"id": req["id"], **score(dataset, req)}
        except Exception as e:  # noqa: BLE001 - one bad answer, not a dead worker
            resp = {"id": req["id"], "error": f"{type(e).__name__}: {e}"[:500]}
        out.write(json.dumps(resp) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
