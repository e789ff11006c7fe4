"""Helpers shared by the workflow tests: run a shipped workflow on a ScriptedEngine."""
from __future__ import annotations

from rolecall.testing import ScriptedEngine
from rolecall.rollout import rollout
from rolecall.types import Problem
from rolecall.workflows import WORKFLOWS, Workflow, build_workflow, load_prompts, workflow_prompts

PROBLEM = Problem(uid="p0", prompt="12+30", answer="42")
# Workflows that answer questions from passages (their own prompt set, a corpus, the qa
# verifier), tested in their own files; the rest play math problems with the math prompts.
QA_WORKFLOWS = ("search_answer",)
MATH_WORKFLOWS = sorted(n for n in WORKFLOWS if n not in QA_WORKFLOWS)


def _own_prompts(name: str) -> bool:
    """Whether the workflow ships its templates itself (a mapping as its `prompts=` default)."""
    import inspect
    default = inspect.signature(WORKFLOWS[name].__init__).parameters.get("prompts")
    return default is not None and isinstance(default.default, dict)


# Workflows whose own default prompts replace the shared math set (their templates differ): read
# from each class, so a workflow added as one file with its templates in it needs no entry here.
OWN_PROMPTS = tuple(n for n in MATH_WORKFLOWS if _own_prompts(n))


def isolated(wf: Workflow) -> dict[str, str]:
    """Route every role to a policy named after it, so scripts can tell roles apart."""
    return {r: r for r in wf.roles}


def by_role(**replies):
    """A script answering by policy (= role under `isolated`); a list value is consumed in call order."""
    iters = {k: iter(v) for k, v in replies.items() if isinstance(v, list)}

    def script(req):
        if req.policy in iters:
            return next(iters[req.policy])
        return replies[req.policy]
    return script


def prompts_for(name: str) -> dict[str, str]:
    """The prompts a math workflow's tests use: its own set if it has one, else the math set."""
    return workflow_prompts(name, None) if name in OWN_PROMPTS else load_prompts("math")


def run(name: str, script, *, options=None, problems=(PROBLEM,), group_size=1, routes=None):
    wf = build_workflow(name, prompts_for(name), options or {})
    engine = ScriptedEngine(script)
    eps = rollout(wf, list(problems), group_size, engine, routes or isolated(wf),
                  lambda role: 32, 0.7)
    return eps, engine


def slots(ep):
    return [t.slot for t in ep.turns]


def roles(ep):
    return [t.role for t in ep.turns]


def score_strict(episodes):
    """Score scripted episodes with the strict math verifier (closed after)."""
    from rolecall.config import RewardCfg
    from rolecall.rewards.verifier import build_verifier
    from rolecall.algo.scoring import score
    verifier = build_verifier(RewardCfg(math_checker="strict"))
    try:
        return score(episodes, verifier)
    finally:
        verifier.close()
