"""Child side of `MathJudge`: symbolic equivalence with math-verify, one JSON line per request.

Runs in its own process because math-verify/sympy can spin for minutes on a pathological
answer (`2^{2^{2^{100}}}`) and its own timeout relies on SIGALRM, which only works on the
main thread of the main interpreter. The parent enforces the deadline by killing us.
Protocol: stdin `{"id", "pred", "gold"}` -> stdout `{"id", "equal": bool}` or
`{"id", "error": str}`; a first line `{"ready": true}` once the imports are done.
"""
from __future__ import annotations

import json
import sys
import warnings
from functools import lru_cache


def main() -> None:
    warnings.filterwarnings("ignore")
    import logging

    logging.disable(logging.WARNING)  # math-verify warns once that *we* enforce the timeout
    from math_verify import parse, verify

    @lru_cache(maxsize=4096)
    def parsed(answer: str):
        # Both sides are already-extracted box contents; re-boxing lets the LaTeX extractor
        # apply its normalisation (\text, \mathbf, units, percentages) to the whole answer.
        return parse("\\boxed{" + answer + "}", parsing_timeout=None)

    out = sys.stdout
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        req = json.loads(line)
        try:
            gold, pred = parsed(req["gold"]), parsed(req["pred"])
            equal = bool(gold and pred and verify(gold, pred, timeout_seconds=None))
            resp = {"id": req["id"], "equal": equal}
        except Exception as e:  # a grader bug is reported, the worker lives on
            resp = {"id": req["id"], "error": f"{type(e).__name__}: {e}"[:500]}
        out.write(json.dumps(resp) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
