"""Child side of `MathJudge`: symbolic equivalence with math-verify, one JSON line per request.

Runs in its own process because math-verify/sympy can spin for minutes on a pathological
answer (`2^{2^{2^{100}}}`) and its own timeout relies on SIGALRM, which only works on the
main thread of the main interpreter. The parent enforces the deadline by killing us.
Protocol: stdin `{"id", "pred", "gold"}` -> stdout `{"id", "equal": bool}` or
`{"id", "error": str}`; a first line `{"ready": true}` once the imports are done.

Exact values are compared exactly. math-verify decides that two expressions without a
float in them are equal when `(a - b).evalf(15, chop=True)` is 0, and `chop` rounds any
difference below about 1e-15 to zero: `\\frac{1}{20!}` "equals" `\\frac{1}{21!}`,
`10^{-30}` "equals" `2 \\cdot 10^{-30}`. `install_exact_comparison` wraps that numeric
comparison (which math-verify also uses for the elements of sets, tuples and intervals,
both sides of equations, and matrix entries) so that its "equal" is overruled when both
sides are exact and provably different. Floats and decimals keep math-verify's rounding.
"""
from __future__ import annotations

import json
import sys
import warnings
from functools import lru_cache

# Exact rational arithmetic is used while its numbers stay below this many digits (estimated
# from the expression before computing anything); `10^{10^{7}}` has ten million digits and
# takes seconds, so larger values are evaluated numerically instead.
_EXACT_MAX_DIGITS = 100_000
# Significant digits a numeric difference must have to count as a proof that it is nonzero,
# and the most working precision sympy may use to get them (so cancellation of up to about
# this many digits is resolved).
_PROOF_DIGITS = 30
_MAX_WORKING_DIGITS = 1_000


def exactly_unequal(a, b) -> bool:
    """True only if `a` and `b` are exact, finite sympy expressions (no floats, no
    percentages) whose difference is a constant (`x - \\frac{1}{20!}` and `x - \\frac{1}{21!}`
    qualify) and provably nonzero. False means "not shown to differ", never "equal": then
    math-verify's own verdict stands."""
    from sympy import Expr, Float, PrecisionExhausted, S, UnevaluatedExpr
    from sympy.matrices.expressions import MatrixExpr

    for x in (a, b):
        if not isinstance(x, Expr) or isinstance(x, MatrixExpr):
            return False
        # Floats keep math-verify's rounding (0.333333 = 1/3); `9\%` = 9 is its deliberate rule
        # (a percentage is X * UnevaluatedExpr(1/100)); infinities make the difference NaN.
        if x.has(Float, UnevaluatedExpr, S.Infinity, S.NegativeInfinity, S.ComplexInfinity, S.NaN):
            return False
    if a == b:
        return False
    diff = a - b
    if diff.free_symbols:
        return False
    size = _exact_digits(diff)
    if size is not None and size <= _EXACT_MAX_DIGITS:
        exact = diff.doit()  # one Rational
        if exact.is_Rational:
            return exact != 0
    try:
        value = diff.evalf(_PROOF_DIGITS, strict=True, maxn=_MAX_WORKING_DIGITS)
    except PrecisionExhausted:  # no digit of the difference is certain: it may well be 0
        return False
    return bool(value.is_number) and value.is_zero is False


def _exact_digits(expr) -> int | None:
    """About how many digits evaluating `expr` exactly involves, if it is built from integers
    and fractions with + - * /, integer powers, factorials and binomials; None otherwise."""
    from sympy import Add, Mul, Pow, Rational, binomial, factorial

    if isinstance(expr, Rational):
        return (expr.p.bit_length() + expr.q.bit_length()) // 3 + 1
    if isinstance(expr, (Add, Mul)):
        sizes = [_exact_digits(arg) for arg in expr.args]
        return None if None in sizes else sum(sizes)
    if isinstance(expr, Pow) and expr.exp.is_Integer:
        base = _exact_digits(expr.base)
        return None if base is None else base * max(1, abs(int(expr.exp)))
    if isinstance(expr, factorial) and expr.args[0].is_Integer and expr.args[0] >= 0:
        n = int(expr.args[0])
        return n * max(1, n.bit_length()) // 3 + 1  # n! < n^n
    if isinstance(expr, binomial) and all(arg.is_Integer for arg in expr.args) and expr.args[0] >= 0:
        return int(expr.args[0]) // 3 + 1  # C(n, k) < 2^n
    return None


def install_exact_comparison() -> None:
    """Make math-verify's numeric comparison exact for exact values (see the module docstring).

    math-verify's grader looks `sympy_numeric_eq` up as a module global on each call, so
    replacing it here covers every place it is used. math-verify is pinned (<0.10) to the
    version this was written against; the regression corpus in tests/test_math_verify.py
    fails if the hook stops taking effect.
    """
    from math_verify import grader

    numeric_eq = grader.sympy_numeric_eq
    if getattr(numeric_eq, "rolecall_exact", False):
        return

    def exact_numeric_eq(a, b, float_rounding, numeric_precision):
        if not numeric_eq(a, b, float_rounding, numeric_precision):
            return False
        try:
            return not exactly_unequal(a, b)
        except Exception:  # a sympy error in the check: keep math-verify's verdict
            return True

    exact_numeric_eq.rolecall_exact = True
    grader.sympy_numeric_eq = exact_numeric_eq


def main() -> None:
    warnings.filterwarnings("ignore")
    import logging

    logging.disable(logging.WARNING)  # math-verify warns once that *we* enforce the timeout
    from math_verify import parse, verify

    install_exact_comparison()

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
