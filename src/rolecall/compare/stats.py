"""Paired comparisons over seeds and problems: an estimate, two 95 % intervals, the smallest
effect the design could detect, and where the variance comes from.

The data of one comparison is a table D[s, p]: for seed s and validation problem p, arm A's
mean accuracy over its k samples of p minus arm B's (or, for a role against a trivial rule,
the mean over the same k episodes of outcome minus the rule's outcome), with the sampling
variance of that cell mean beside it. Seeds and problems are crossed: every seed answers the
same validation problems. The estimate is the mean of D.

Two intervals, because each is wrong in its own way at few seeds:

- **bootstrap**: resample seeds with replacement, then problems with replacement (the same
  problem draw for every seed, since problems are crossed with seeds), and take the 2.5 and
  97.5 percentiles of the resampled means. Percentile intervals are too narrow with few seeds
  (a seed bootstrap over 3 seeds has 10 distinct draws);
- **t**: the crossed two-way random-effects variance of the mean (seed, problem and residual
  mean squares), with Satterthwaite's degrees of freedom.

The verdict takes both: "A > B" or "B > A" only when both intervals exclude zero on the same
side, else "cannot tell". The minimum detectable effect (80 % power, two-sided 5 %) is
(t_0.975 + t_0.80) x the standard error, with the same degrees of freedom.

The variance of the mean splits into a between-seed part, a between-problem part, a
seed-by-problem part and the part that comes from sampling each problem only k times; the
projections (twice the seeds, twice the samples) say which buys more power.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rolecall.tdist import mde_factor, t_quantile, verdict_of

BOOTSTRAP_DRAWS = 4000


# -- the table of one comparison ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Table:
    """D[s, p] (seed x problem cell means of the difference) and the sampling variance of each cell
    mean (V[s, p]: what answering the problem only k times leaves), over seeds and problems that
    every arm covered."""

    seeds: tuple[str, ...]
    problems: tuple[str, ...]
    diff: np.ndarray
    var: np.ndarray

    @property
    def shape(self) -> tuple[int, int]:
        return self.diff.shape


def cell_stats(a: list[float], b: list[float] | None = None) -> tuple[float, float]:
    """(mean difference, sampling variance of that mean) of one cell: `a` and `b` are one problem's
    outcomes under two arms (independent samples), or with `b` None, `a` holds per-episode
    differences (paired within episodes). Unbiased sample variances; one sample gives variance 0
    (nothing to estimate it from), which the residual mean square then absorbs."""
    def mean_var(xs: list[float]) -> tuple[float, float]:
        n = len(xs)
        m = sum(xs) / n
        v = sum((x - m) ** 2 for x in xs) / (n - 1) if n > 1 else 0.0
        return m, v / n

    ma, va = mean_var(a)
    if b is None:
        return ma, va
    mb, vb = mean_var(b)
    return ma - mb, va + vb


def make_table(cells: dict[str, dict[str, tuple[float, float]]]) -> Table:
    """A Table from {seed: {problem: (mean, var)}}, keeping the problems every seed has."""
    seeds = sorted(cells)
    if not seeds:
        raise ValueError("no seed to compare")
    common = set.intersection(*(set(cells[s]) for s in seeds))
    problems = sorted(common)
    if not problems:
        raise ValueError("the arms share no validation problem")
    diff = np.array([[cells[s][p][0] for p in problems] for s in seeds], dtype=float)
    var = np.array([[cells[s][p][1] for p in problems] for s in seeds], dtype=float)
    return Table(tuple(seeds), tuple(problems), diff, var)


# -- estimates -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Components:
    """The variance of the mean, split: `seed` + `problem` + `interaction` + `sampling` = `total`
    (each already divided by how many seeds, problems, cells it is averaged over)."""

    seed: float
    problem: float
    interaction: float
    sampling: float
    df: float

    @property
    def total(self) -> float:
        return self.seed + self.problem + self.interaction + self.sampling


def components(t: Table) -> Components:
    """Two-way crossed random-effects ANOVA on D (method of moments, each component floored at 0).

    E[MS_seed] = s2_e + P s2_seed, E[MS_problem] = s2_e + S s2_problem, E[MS_res] = s2_e, where s2_e
    is the seed x problem interaction plus the cell's sampling variance (the mean of V). The
    variance of the grand mean is s2_seed/S + s2_problem/P + s2_e/(S P). Degrees of freedom by
    Satterthwaite over the mean squares that enter it."""
    S, P = t.shape
    D = t.diff
    grand = D.mean()
    sampling = float(t.var.mean())
    rows, cols = D.mean(axis=1), D.mean(axis=0)
    ms_s = P * float(((rows - grand) ** 2).sum()) / (S - 1) if S > 1 else 0.0
    ms_p = S * float(((cols - grand) ** 2).sum()) / (P - 1) if P > 1 else 0.0
    if S > 1 and P > 1:
        resid = D - rows[:, None] - cols[None, :] + grand
        ms_e = float((resid ** 2).sum()) / ((S - 1) * (P - 1))
    elif S > 1:  # one problem: the seed spread is all there is
        ms_e = ms_s
    elif P > 1:  # one seed: seeds cannot be told from problems
        ms_e = ms_p
    else:
        ms_e = sampling
    s2_seed = max(ms_s - ms_e, 0.0) / P if S > 1 and P > 1 else 0.0
    s2_prob = max(ms_p - ms_e, 0.0) / S if S > 1 and P > 1 else 0.0
    inter = max(ms_e - sampling, 0.0)
    terms = [(ms_e / (S * P), (S - 1) * (P - 1) if S > 1 and P > 1 else max(S, P) - 1)]
    if S > 1 and P > 1:
        terms += [(s2_seed / S, S - 1), (s2_prob / P, P - 1)]
    total = sum(v for v, _ in terms)
    denom = sum(v * v / d for v, d in terms if d > 0 and v > 0)
    df = total * total / denom if denom > 0 else float(max(S - 1, 1))
    return Components(seed=s2_seed / S, problem=s2_prob / P, interaction=inter / (S * P),
                      sampling=min(sampling, ms_e) / (S * P), df=max(df, 1.0))


def bootstrap(t: Table, draws: int = BOOTSTRAP_DRAWS, seed: int = 0) -> tuple[float, float]:
    """The 95 % percentile interval of the mean of D, resampling seeds and then problems."""
    S, P = t.shape
    rng = np.random.default_rng(seed)
    cs = rng.multinomial(S, [1.0 / S] * S, size=draws).astype(float)  # how often each seed is drawn
    cp = rng.multinomial(P, [1.0 / P] * P, size=draws).astype(float)
    means = ((cs @ t.diff) * cp).sum(axis=1) / (S * P)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(lo), float(hi)


@dataclass(frozen=True)
class Answer:
    """One question's answer: the estimate, both intervals, the verdict, the detectable effect and
    the variance split."""

    estimate: float
    bootstrap_ci: tuple[float, float]
    t_ci: tuple[float, float]
    verdict: str  # "A > B" | "B > A" | "cannot tell"
    mde: float  # smallest |effect| detectable with 80 % power at this design
    se: float
    parts: Components
    seeds: int
    problems: int
    mde_twice_seeds: float
    mde_twice_samples: float

    @property
    def buy(self) -> str:
        """Which doubling lowers the detectable effect more."""
        return "seeds" if self.mde_twice_seeds <= self.mde_twice_samples else "samples"

    def as_dict(self, digits: int = 4) -> dict:
        r = lambda x: round(float(x), digits)  # noqa: E731
        p = self.parts
        return {"estimate": r(self.estimate), "ci95_bootstrap": [r(x) for x in self.bootstrap_ci],
                "ci95_t": [r(x) for x in self.t_ci], "verdict": self.verdict, "mde80": r(self.mde),
                "se": r(self.se), "df": r(p.df), "seeds": self.seeds, "problems": self.problems,
                "variance": {"seed": r(p.seed), "problem": r(p.problem), "interaction": r(p.interaction),
                             "sampling": r(p.sampling), "total": r(p.total)},
                "mde80_twice_seeds": r(self.mde_twice_seeds), "mde80_twice_samples": r(self.mde_twice_samples),
                "buy": self.buy}


def answer(t: Table, draws: int = BOOTSTRAP_DRAWS, seed: int = 0) -> Answer:
    """Estimate, intervals, verdict and detectable effect of the mean difference in `t`."""
    S, P = t.shape
    parts = components(t)
    se = math.sqrt(parts.total)
    est = float(t.diff.mean())
    half = t_quantile(0.975, parts.df) * se
    t_ci = (est - half, est + half)
    boot = bootstrap(t, draws, seed) if S * P > 1 else (est, est)
    factor = mde_factor(parts.df)
    # Projections: twice the seeds halves the seed part and the per-cell parts; twice the samples
    # per problem halves only the sampling part (the df are kept, which slightly favours neither).
    twice_seeds = math.sqrt(parts.seed / 2 + parts.problem + (parts.interaction + parts.sampling) / 2)
    twice_samples = math.sqrt(parts.seed + parts.problem + parts.interaction + parts.sampling / 2)
    return Answer(est, boot, t_ci, verdict_of(boot, t_ci), factor * se, se, parts, S, P,
                  factor * twice_seeds, factor * twice_samples)
