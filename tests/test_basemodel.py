"""The embedded model's pretraining data: packed facts teach sums, copying the most common
listed answer, and verdict stamps; the oracle transcripts play every shipped workflow."""
from __future__ import annotations

import random
import re

from rolecall.basemodel.make import COPY_FACTS, PRETRAINED, _fact
from rolecall.basemodel.transcripts import OracleEngine, OracleRates
from rolecall.parsing import first_verdict, last_boxed
from rolecall.rollout import rollout
from rolecall.tasks.arithmetic import ArithmeticTask
from rolecall.workflows import build_workflow, load_prompts


def test_packed_facts_are_right_and_mixed_in_the_set_shares():
    train = ArithmeticTask().train()
    rng = random.Random(0)
    kinds = {"sum": 0, "verdict": 0, "copy": 0}
    for _ in range(3000):
        p = train[rng.randrange(len(train))]
        q, a = _fact(p, rng)
        if q.endswith("="):
            kinds["sum"] += 1
            assert a == f"{p.answer}\n"
        elif q.startswith("1: "):
            kinds["copy"] += 1
            listed = re.findall(r"\\boxed\{(\d+)\}", q)
            assert len(listed) == 3
            assert last_boxed(a) == max(listed, key=listed.count)  # the most common, ties to the first
        else:
            kinds["verdict"] += 1
            said = last_boxed(q)
            assert first_verdict(a) is (said == p.answer)
    for kind in ("verdict", "copy"):
        assert abs(kinds[kind] / 3000 - COPY_FACTS) < 0.03


def test_the_oracle_plays_every_shipped_workflow():
    """Each workflow's turns come out in the shape training will see (the evaluator's follow-up
    turns included): verdict stamps, strategy lists, boxed answers and picks."""
    rng = random.Random(0)
    engine = OracleEngine(OracleRates(), rng, lambda msgs: "\n".join(m["content"] for m in msgs))
    train = ArithmeticTask().train()
    for name in sorted({n for n, _, _ in PRETRAINED}):  # the arithmetic workflows make-base plays
        wf = build_workflow(name, load_prompts("math"), {})
        eps = rollout(wf, train[:20], 1, engine, {r: r for r in wf.roles}, lambda r: 0, 1.0)
        for ep in eps:
            for t in ep.turns:
                if t.role == "evaluator":
                    assert first_verdict(t.completion_text) is not None
                elif t.role == "orchestrator":
                    assert t.completion_text.startswith("1. ")
                else:
                    assert last_boxed(t.completion_text) is not None
    assert engine.examples
