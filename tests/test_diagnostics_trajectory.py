"""Trajectory-side role signatures against hand-computed values (definitions of "When Does
Multi-Agent RL Improve LLM Workflows?", arXiv 2605.24202, Appendix A.3-A.4)."""
from __future__ import annotations

import pytest

from rolecall.diagnostics.trajectory import (
    verdict_form, has_code_fence, has_hedge, jaccard, mixed_group_frac, parallel_jaccard, percentile,
    role_signatures, trigrams)
from rolecall.testing import ScriptedEngine
from rolecall.rollout import rollout
from rolecall.diagnostics.rollout_metrics import rollout_metrics
from rolecall.types import Episode, Problem, Turn
from rolecall.workflows import build_workflow, load_prompts


def turn(role, text, n_tokens, wave=0, n_prompt=10):
    return Turn(role=role, slot=role, policy=role, prompt_text="", completion_text=text,
                prompt_ids=[0] * n_prompt, completion_ids=[1] * n_tokens, wave=wave)


def test_percentile_interpolates_like_numpy():
    xs = [10.0, 20.0, 30.0, 40.0]
    assert percentile(xs, 50) == 25.0
    assert percentile(xs, 95) == pytest.approx(38.5)  # 30 + 0.85 * 10
    assert percentile([7.0], 95) == 7.0


def test_text_classifiers():
    assert has_hedge("Wait, that is off") and has_hedge("hmm.") and has_hedge("On second thought, no")
    assert not has_hedge("awaited results") and not has_hedge("factually")  # whole words only
    assert has_code_fence("```python\na = 1\nb = 2\nprint(a + b)\n```")
    assert not has_code_fence("```python\nprint(1)\n```")  # one body line is not a solution block
    assert verdict_form("Looks fine. \\boxed{Correct}", 5) == "stamp"
    assert verdict_form("Looks fine. \\boxed{Correct}", 201) == "other"  # too long for a stamp
    assert verdict_form("```\nx=1\ny=2\nz=3\n```\\boxed{Incorrect}", 20) == "fence"
    assert verdict_form("no verdict", 3) == "other"


def test_jaccard_of_trigrams_by_hand():
    a, b = trigrams("a b c d"), trigrams("a b c e")  # {abc, bcd} vs {abc, bce}
    assert jaccard(a, b) == pytest.approx(1 / 3)
    assert jaccard(set(), set()) == 1.0


def test_role_signatures_by_hand():
    p = Problem("u", "q", "1")
    ep1 = Episode(p, 0, [turn("generator", "x y z w \\boxed{1}", 10, wave=0),
                         turn("generator", "x y z q wait", 20, wave=0),
                         turn("aggregator", "\\boxed{1}", 4, wave=1)])
    ep2 = Episode(p, 1, [turn("generator", "a b c", 30, wave=0),
                         turn("generator", "a b c", 40, wave=0),
                         turn("aggregator", "I pick the first because " * 10 + "\\boxed{1}", 50, wave=1)])
    m = role_signatures([ep1, ep2])
    assert m["role/generator/len_p50"] == 25.0
    assert m["role/generator/boxed_rate"] == 0.25 and m["role/generator/hedge_rate"] == 0.25
    assert m["role/aggregator/terse_rate"] == 0.5  # 4 tokens with a box; 50 tokens is not terse
    assert m["role/aggregator/len_p95"] == pytest.approx(4 + 0.95 * 46)
    # ep1: {xyz, yzw, zw\boxed{1}} vs {xyz, yzq, zqwait}: 1/5; ep2: identical: 1 -> mean 0.6
    assert m["role/generator/jaccard3"] == pytest.approx((1 / 5 + 1.0) / 2)
    assert "role/aggregator/jaccard3" not in m  # a single slot has no pairs
    assert m["role/generator/completion_tokens"] == (10 + 20 + 30 + 40) / 2
    assert m["role/aggregator/prompt_tokens"] == 10.0


EXTRAS = {"evaluator": ("verdict_form",), "orchestrator": ("distinct_openers",)}


def test_role_diagnostics_a_workflow_asks_for():
    p = Problem("u", "q", "1")
    eps = [Episode(p, 0, [turn("evaluator", "ok \\boxed{Correct}", 5), turn("orchestrator", "Use algebra here. Then", 5)]),
           Episode(p, 1, [turn("evaluator", "```\na\nb\nc\n```", 9), turn("orchestrator", "use  Algebra here. Or", 5)]),
           Episode(p, 2, [turn("evaluator", "it is \\boxed{Wrong}", 5), turn("orchestrator", "Try small cases", 5)])]
    assert "role/evaluator/form_stamp" not in role_signatures(eps), "only where a workflow asks for them"
    m = role_signatures(eps, EXTRAS)
    assert (m["role/evaluator/form_stamp"], m["role/evaluator/form_fence"], m["role/evaluator/form_other"]) == \
        pytest.approx((1 / 3, 1 / 3, 1 / 3))
    assert m["role/evaluator/verdict_parse_rate"] == pytest.approx(1 / 3)
    assert m["role/orchestrator/distinct_openers"] == 2.0  # case and spacing do not make a new opener
    assert m["role/orchestrator/opener_sample"] == 3.0


def test_distinct_openers_count_a_fixed_sample_of_turns():
    """64 episodes with 64 different openers: the count is over 32 evenly spaced turns, so a
    run sampling twice as many episodes does not report twice the diversity."""
    from rolecall.diagnostics.trajectory import OPENER_SAMPLE

    p = Problem("u", "q", "1")
    eps = [Episode(p, i, [turn("orchestrator", f"strategy number {i} first", 5)]) for i in range(64)]
    m = role_signatures(eps, EXTRAS)
    assert OPENER_SAMPLE == 32
    assert m["role/orchestrator/distinct_openers"] == 32.0 == m["role/orchestrator/opener_sample"]
    m = role_signatures(eps[:10], EXTRAS)
    assert m["role/orchestrator/distinct_openers"] == 10.0


def test_mixed_group_fraction_counts_problems_not_turns():
    a, b = Problem("a", "q", "1"), Problem("b", "q", "1")
    eps = [Episode(a, 0, reward=1.0), Episode(a, 1, reward=0.0), Episode(b, 0, reward=1.0), Episode(b, 1, reward=1.0),
           Episode(b, 2, reward=None)]
    assert mixed_group_frac(eps) == 0.5


def test_rollout_marks_parallel_slots_by_wave():
    """Voting's three generators share a wave (parallel); eval_opt's generator calls do not."""
    probs = [Problem("p", "1+1", "2")]
    vote = rollout(build_workflow("voting", load_prompts(), {}), probs, 2, ScriptedEngine(lambda r: "a b c \\boxed{1}"),
                   {"generator": "g", "aggregator": "a"}, lambda r: 8, 0.7)
    waves = [(t.role, t.wave) for t in vote[0].turns]
    assert waves == [("generator", 1), ("generator", 1), ("generator", 1), ("aggregator", 2)]
    assert parallel_jaccard(vote)["role/generator/jaccard3"] == 1.0
    evo = rollout(build_workflow("eval_opt", load_prompts(), {"rounds": 3}), probs, 1,
                  ScriptedEngine(lambda r: "x \\boxed{Incorrect}"), {"generator": "g", "evaluator": "e"}, lambda r: 8, 0.7)
    assert parallel_jaccard(evo) == {}


def test_every_step_row_carries_every_signature_for_every_role():
    probs = [Problem("p", "1+1", "2")]
    eps = rollout(build_workflow("voting", load_prompts(), {}), probs, 2, ScriptedEngine(lambda r: "\\boxed{1}"),
                  {"generator": "g", "aggregator": "a"}, lambda r: 8, 0.7)
    for ep in eps:
        ep.reward = 1.0
    m = rollout_metrics(eps)
    for role in ("generator", "aggregator"):
        for k in ("len_p50", "len_p95", "boxed_rate", "hedge_rate", "terse_rate", "fence_rate", "truncated_frac",
                  "prompt_tokens", "completion_tokens"):
            assert f"role/{role}/{k}" in m, (role, k)
    assert "role/generator/jaccard3" in m and "reward/mixed_group_frac" in m and "tokens/per_episode" in m
