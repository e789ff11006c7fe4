"""Student's t for intervals over few seeds: its distribution and quantiles (from the regularized
incomplete beta function, so no scipy), the smallest effect a design detects, and the verdict an
interval allows. Plain math, used by `rolecall compare`'s statistics and the grid's record tables.
"""
from __future__ import annotations

import math

POWER = 0.80  # the power at which a detectable effect is stated


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(x: float, df: float) -> float:
    """P(T <= x) for Student's t with `df` (real, > 0) degrees of freedom."""
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + x * x))
    return 1.0 - tail if x >= 0 else tail


def t_quantile(q: float, df: float) -> float:
    """The `q` quantile of Student's t (bisection on `t_cdf`; df may be fractional, inf is the normal)."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"quantile {q} outside (0, 1)")
    if math.isinf(df):
        return _normal_quantile(q)
    lo, hi = -1e4, 1e4
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < q:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def _normal_quantile(q: float) -> float:
    lo, hi = -40.0, 40.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if 0.5 * math.erfc(-mid / math.sqrt(2.0)) < q:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def mde_factor(df: float, power: float = POWER) -> float:
    """(t_0.975 + t_power) with `df` degrees of freedom: the minimum detectable effect in standard errors."""
    return t_quantile(0.975, df) + t_quantile(power, df)


def verdict_of(*intervals: tuple[float, float]) -> str:
    """"A > B" or "B > A" only when every interval excludes zero on that side, else "cannot tell"."""
    if all(lo > 0 for lo, _ in intervals):
        return "A > B"
    if all(hi < 0 for _, hi in intervals):
        return "B > A"
    return "cannot tell"
