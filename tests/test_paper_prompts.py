"""Shipped prompt sets: the short `math`/`code` sets (embedded model) and the `paper_math`/
`paper_code` sets (real checkpoints) define every template with exactly its placeholders,
and the paper sets drive the shipped workflows end to end with a scripted engine."""
from __future__ import annotations

from string import Template

import pytest

from rolecall.testing import ScriptedEngine
from rolecall.rollout import rollout
from rolecall.types import Problem
from rolecall.workflows import PROMPT_SETS, build_workflow, load_prompts

# Every template a shipped workflow renders, with the placeholders the workflow fills.
PLACEHOLDERS = {
    "generator": {"problem"},
    "revise": {"critique"},
    "evaluator": {"problem", "solution"},
    "evaluator_followup": {"solution"},
    "aggregator": {"problem", "candidates", "n"},
    "orchestrator": {"problem", "n"},
    "worker": {"strategy", "problem"},
    "synthesizer": {"problem", "solutions"},
    "default_strategy": set(),
}
PAPER_SETS = ("paper_math", "paper_code")
SHORT_SETS = ("math", "code")
# The short sets are checked on every template but evaluator_followup, which is added to them
# separately; the paper sets on all nine.
CASES = ([(s, t) for s in PAPER_SETS for t in PLACEHOLDERS]
         + [(s, t) for s in SHORT_SETS for t in PLACEHOLDERS if t != "evaluator_followup"])


def identifiers(text: str) -> set[str]:
    """The `$name` / `${name}` placeholders of a template; ValueError on a stray `$`."""
    t = Template(text)
    names = set()
    for m in t.pattern.finditer(text):
        if m.group("invalid") is not None:
            raise ValueError(f"stray '$' at offset {m.start('invalid')}: write '$$' for a literal dollar")
        names.add(m.group("named") or m.group("braced") or "")
    names.discard("")  # `$$` escapes
    return names


def test_paper_sets_are_registered():
    assert {"math", "code", "paper_math", "paper_code"} <= set(PROMPT_SETS)


# Templates of workflows the paper does not have (chain), in each set after the paper's nine.
EXTRA = {"verifier": {"problem", "solution"}, "refiner": {"critique"}, "debate": {"problem", "own", "peers"},
         "scorer": {"problem", "solution"}}


@pytest.mark.parametrize("name", PAPER_SETS)
def test_paper_sets_define_exactly_the_nine_templates(name):
    assert set(load_prompts(name)) == set(PLACEHOLDERS) | set(EXTRA)


@pytest.mark.parametrize("name", PAPER_SETS + SHORT_SETS)
@pytest.mark.parametrize("template", sorted(EXTRA))
def test_chain_templates_render_with_exactly_their_placeholders(name, template):
    assert identifiers(load_prompts(name)[template]) == EXTRA[template]


@pytest.mark.parametrize("name", SHORT_SETS)
def test_short_sets_define_the_templates(name):
    assert set(PLACEHOLDERS) - {"evaluator_followup"} <= set(load_prompts(name))


@pytest.mark.parametrize("name,template", CASES)
def test_template_renders_with_exactly_its_placeholders(name, template):
    text = load_prompts(name)[template]
    assert text.strip(), f"{name}.{template} is empty"
    assert identifiers(text) == PLACEHOLDERS[template]
    values = {k: f"<{k.upper()}>" for k in PLACEHOLDERS[template]}
    rendered = Template(text).substitute(values)  # raises on a missing or unknown `$name`
    for v in values.values():
        assert v in rendered


@pytest.mark.parametrize("name", PAPER_SETS)
@pytest.mark.parametrize("template", ["evaluator", "evaluator_followup"])
def test_paper_evaluator_asks_for_a_verdict_box(name, template):
    text = load_prompts(name)[template]
    assert "\\boxed{Correct}" in text and "\\boxed{Incorrect}" in text


@pytest.mark.parametrize("name", PAPER_SETS + SHORT_SETS)
def test_aggregator_asks_for_a_boxed_choice(name):
    assert "\\boxed{" in load_prompts(name)["aggregator"]


@pytest.mark.parametrize("template", ["generator", "revise", "worker", "synthesizer"])
def test_paper_answer_formats(template):
    """Roles that write a final answer ask for the form the rewards read."""
    assert "\\boxed{}" in load_prompts("paper_math")[template]
    assert "```python" in load_prompts("paper_code")[template]


# --------------------------------------------------------------------------- workflows

PROBLEMS = {"paper_math": "Find the sum of all positive divisors of 28.",
            "paper_code": "Read an integer n from standard input and print 2*n."}


def _run(workflow: str, prompts: str, script, options=None):
    wf = build_workflow(workflow, load_prompts(prompts), options or {})
    engine = ScriptedEngine(script)
    problem = Problem(uid="p0", prompt=PROBLEMS[prompts], answer="56")
    (ep,) = rollout(wf, [problem], 1, engine, {r: r for r in wf.roles}, lambda role: 64, 0.7)
    requests = [r for batch in engine.batches for r in batch]
    return ep, requests


def _text(request) -> str:
    return "\n".join(m["content"] for m in request.messages)


@pytest.mark.parametrize("prompts", PAPER_SETS)
def test_eval_opt_episode_with_paper_prompts(prompts):
    """generator -> evaluator (Incorrect) -> generator revises -> evaluator (Correct)."""
    gen = iter(["first try \\boxed{54}", "second try \\boxed{56}"])
    ev = iter(["\\boxed{Incorrect} The divisor 14 is missing.", "\\boxed{Correct} All divisors are counted."])
    ep, requests = _run("eval_opt", prompts,
                        lambda r: next(gen) if r.policy == "generator" else next(ev))
    assert [t.role for t in ep.turns] == ["generator", "evaluator", "generator", "evaluator"]
    assert ep.info["verdicts"] == [False, True]
    assert ep.final_answer == "second try \\boxed{56}"
    problem = PROBLEMS[prompts]
    for r in requests:  # every role sees the problem somewhere in its chat
        assert problem in _text(r)
    g1, e1, g2, e2 = requests
    assert g1.messages[0]["content"] == Template(load_prompts(prompts)["generator"]).substitute(problem=problem)
    assert "first try \\boxed{54}" in e1.messages[-1]["content"]
    assert "The divisor 14 is missing." in g2.messages[-1]["content"]  # the revise prompt carries the critique
    assert "second try \\boxed{56}" in e2.messages[-1]["content"]  # the evaluator sees the revision
    assert "$" not in "".join(_text(r) for r in requests)


@pytest.mark.parametrize("prompts", PAPER_SETS)
@pytest.mark.parametrize("workflow,script", [
    ("single", lambda r: "\\boxed{56}"),
    ("voting", lambda r: "\\boxed{2}" if r.policy == "aggregator" else "\\boxed{56}"),
    ("orch_workers", lambda r: "1. List divisors.\n2. Use the formula.\n3. Pair divisors."
     if r.policy == "orchestrator" else "\\boxed{56}"),
])
def test_other_workflows_run_with_paper_prompts(prompts, workflow, script):
    ep, requests = _run(workflow, prompts, script)
    assert ep.final_answer == "\\boxed{56}"
    for r in requests:
        assert PROBLEMS[prompts] in _text(r)
    if workflow == "orch_workers":
        assert ep.info["strategies_missing"] == 0
        workers = [_text(r) for r in requests if r.policy == "worker"]
        assert len(workers) == 3 and any("Use the formula." in w for w in workers)
