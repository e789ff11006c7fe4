"""Trajectory-side signatures per role, from the text and token counts of one step's episodes.

Definitions follow "When Does Multi-Agent RL Improve LLM Workflows? Workflow, Scale, and
Policy-Sharing Tradeoffs" (arXiv 2605.24202, §5 and Appendix A.3–A.4):
- `len_p50`, `len_p95`: completion-token percentiles (linear interpolation between ranks).
- `boxed_rate`: turns whose text (after any think block) holds a parseable `\\boxed{}`.
- `hedge_rate`: turns containing any phrase of HEDGES (case-insensitive, whole words).
- `terse_rate`: turns of at most 30 completion tokens that hold a parseable `\\boxed{}`
  (a selector's stamp; computed for every role so capture shows).
- `fence_rate`: turns holding a fenced code block with at least 3 body lines.
- `jaccard3`: for roles with parallel slots (same role, same wave, same episode), the mean
  pairwise Jaccard of whitespace-token 3-gram sets, averaged within the episode and then
  across episodes.
Extra diagnostics a workflow asks for, per role (`Workflow.role_diagnostics`, names in
`ROLE_DIAGNOSTICS`; the paper's workflows ask for them on their judge and planner roles):
- `verdict_form`: `form_fence` (a fenced block of >= 3 body lines), `form_stamp` (<= 200
  tokens, a `\\boxed{Correct|Incorrect}` verdict, no fence), `form_other`;
  `verdict_parse_rate` = a parseable verdict box.
- `distinct_openers`: unique lower-cased first-3-word openers among a fixed number of turns
  (`OPENER_SAMPLE`, evenly spaced over the step's episodes; fewer only when the step has
  fewer, recorded as `opener_sample`), so the count compares across runs of different
  batch sizes.
- `prompt_tokens`, `completion_tokens`: per episode, summed over the role's turns.
"""
from __future__ import annotations

import re
from collections import defaultdict
from itertools import combinations
from statistics import fmean
from typing import Callable, Mapping

from rolecall.parsing import first_verdict, last_boxed, strip_think
from rolecall.types import Episode, Turn

HEDGES = ("wait", "alternatively", "actually", "hmm", "let me reconsider", "on second thought",
          "not correct", "this is wrong")
_HEDGE_RE = re.compile(r"\b(?:" + "|".join(re.escape(h) for h in HEDGES) + r")\b", re.IGNORECASE)
_FENCE_RE = re.compile(r"```[^\n`]*\n(.*?)```", re.DOTALL)
TERSE_TOKENS = 30
OPENER_SAMPLE = 32
STAMP_TOKENS = 200


def percentile(values: list[float], q: float) -> float:
    """q in [0, 100], linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return float("nan")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def has_box(text: str) -> bool:
    return bool(last_boxed(strip_think(text)))


def has_hedge(text: str) -> bool:
    return _HEDGE_RE.search(text) is not None


def has_code_fence(text: str, min_lines: int = 3) -> bool:
    return any(len([ln for ln in body.splitlines() if ln.strip()]) >= min_lines for body in _FENCE_RE.findall(text))


def verdict(text: str) -> str | None:
    """'correct' / 'incorrect' from the first verdict box (`parsing.first_verdict`), else None."""
    v = first_verdict(text)
    return None if v is None else ("correct" if v else "incorrect")


def verdict_form(text: str, n_tokens: int) -> str:
    if has_code_fence(text):
        return "fence"
    if n_tokens <= STAMP_TOKENS and verdict(text) is not None and "```" not in text:
        return "stamp"
    return "other"


def trigrams(text: str) -> set[tuple[str, str, str]]:
    w = text.split()
    return {tuple(w[i:i + 3]) for i in range(len(w) - 2)}


def jaccard(a: set, b: set) -> float:
    if not a and not b:
        return 1.0  # two empty outputs are identical
    return len(a & b) / len(a | b)


def fixed_sample(items: list, k: int) -> list:
    """Up to k items evenly spaced over the list (no random draw: the same step gives the same sample)."""
    n = len(items)
    return items if n <= k else [items[(j * n) // k] for j in range(k)]


def opener(text: str) -> str:
    return " ".join(strip_think(text).lower().split()[:3])


def verdict_forms(turns: list[Turn]) -> dict[str, float]:
    forms = [verdict_form(t.completion_text, len(t.completion_ids)) for t in turns]
    out = {f"form_{f}": fmean(x == f for x in forms) for f in ("fence", "stamp", "other")}
    out["verdict_parse_rate"] = fmean(verdict(t.completion_text) is not None for t in turns)
    return out


def distinct_openers(turns: list[Turn]) -> dict[str, float]:
    return {"distinct_openers": float(len({opener(t.completion_text) for t in fixed_sample(turns, OPENER_SAMPLE)})),
            "opener_sample": float(min(OPENER_SAMPLE, len(turns)))}


# What `Workflow.role_diagnostics` may name: role -> these extra signatures of its turns.
ROLE_DIAGNOSTICS: dict[str, Callable[[list[Turn]], dict[str, float]]] = {
    "verdict_form": verdict_forms, "distinct_openers": distinct_openers}


def role_signatures(episodes: list[Episode], extras: Mapping[str, tuple[str, ...]] | None = None) -> dict[str, float]:
    """`role/<role>/<signature>` for every role that has turns in these episodes, plus the
    `extras` (role -> names in `ROLE_DIAGNOSTICS`) a workflow asks for."""
    by_role: dict[str, list[Turn]] = defaultdict(list)
    for ep in episodes:
        for t in ep.turns:
            by_role[t.role].append(t)
    out: dict[str, float] = {}
    n_ep = max(1, len(episodes))
    for role, turns in by_role.items():
        lens = [float(len(t.completion_ids)) for t in turns]
        texts = [t.completion_text for t in turns]
        m = {
            "len_p50": percentile(lens, 50), "len_p95": percentile(lens, 95),
            "boxed_rate": fmean(map(has_box, texts)), "hedge_rate": fmean(map(has_hedge, texts)),
            "fence_rate": fmean(map(has_code_fence, texts)),
            "terse_rate": fmean(len(t.completion_ids) <= TERSE_TOKENS and has_box(t.completion_text) for t in turns),
            "prompt_tokens": sum(len(t.prompt_ids) for t in turns) / n_ep,
            "completion_tokens": sum(len(t.completion_ids) for t in turns) / n_ep,
        }
        for name in (extras or {}).get(role, ()):
            m.update(ROLE_DIAGNOSTICS[name](turns))
        out.update({f"role/{role}/{k}": v for k, v in m.items()})
    out.update(parallel_jaccard(episodes))
    return out


def parallel_jaccard(episodes: list[Episode]) -> dict[str, float]:
    """Mean pairwise 3-gram Jaccard between parallel slots of one role, per episode then overall."""
    per_role: dict[str, list[float]] = defaultdict(list)
    for ep in episodes:
        parallel: dict[tuple[str, int], list[Turn]] = defaultdict(list)
        for t in ep.turns:
            parallel[(t.role, t.wave)].append(t)
        for (role, _), group in parallel.items():
            if len(group) < 2:
                continue
            grams = [trigrams(t.completion_text) for t in group]
            per_role[role].append(fmean(jaccard(a, b) for a, b in combinations(grams, 2)))
    return {f"role/{role}/jaccard3": fmean(v) for role, v in per_role.items()}


def mixed_group_frac(episodes: list[Episode]) -> float:
    """Fraction of groups (drawn problems) whose episodes got more than one distinct reward."""
    groups: dict[tuple, set] = defaultdict(set)
    for ep in episodes:
        if ep.reward is not None:
            groups[(ep.group, ep.problem.uid)].add(ep.reward)
    return fmean(len(v) > 1 for v in groups.values()) if groups else float("nan")
