"""math-verify equivalence in a killable worker: known pitfalls (different factorials, lists
of values, `\\text{13}` vs `13`, bold answers, intervals vs inequalities, exact values that
differ beyond float precision), a hard deadline that holds from the main thread, a worker
thread and another process, and whose fault a failed comparison is (a pathological answer
scores 0; a broken judge or gold answer is unscorable)."""
from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from rolecall.rewards import grade_math
from rolecall.rewards.math_judge import MathJudge

# Pathological answers that make sympy spin for minutes (measured: > 60 s unbounded).
TOWER = "2^{2^{2^{2^{100}}}}"
DEADLINE_S = 2.0
# Deadline plus process start/kill slack on a loaded 2-core machine; still far below the
# minutes the unbounded computation takes.
BOUND_S = DEADLINE_S + 8.0


@pytest.fixture(scope="module")
def judge():
    j = MathJudge(deadline_s=DEADLINE_S)
    yield j
    j.close()


# (prediction inside the box, gold, expected verdict)
CORPUS = [
    # factorials: equal values match, different factorials do not
    ("120", "5!", True),
    ("3!", "6", True),
    ("4!", "5!", False),
    ("10!", "3628800", True),
    # wrappers around the number
    ("\\text{13}", "13", True),
    ("\\mathbf{13}", "13", True),
    ("\\textbf{13}", "13", True),
    ("\\$5", "5", True),
    # lists of values: order-free, but every value must be there
    ("1, 2", "2, 1", True),
    ("\\{1,2\\}", "\\{2,1\\}", True),
    ("1, 2", "1, 2, 3", False),
    # intervals vs inequalities; open vs closed is different
    ("(0,1)", "0<x<1", True),
    ("[0,1]", "(0,1)", False),
    # symbolic forms
    ("3\\sqrt{2}", "\\sqrt{18}", True),
    ("\\frac{\\sqrt{3}}{2}", "\\frac{1}{2}\\sqrt{3}", True),
    ("x=3", "3", True),
    ("10\\%", "0.1", True),
    ("\\pi", "3.14159", False),
    ("2", "\\sqrt{4}", True),
    # exact values are compared exactly, not to 15 digits: these differ below 1e-15
    ("\\frac{1}{20!}", "\\frac{1}{21!}", False),
    ("\\frac{1}{21!}", "\\frac{1}{20!}", False),
    ("\\frac{1}{30!}", "\\frac{2}{30!}", False),
    ("\\frac{1}{30!}", "0", False),
    ("10^{-30}", "2 \\cdot 10^{-30}", False),
    ("2 \\cdot 10^{-30}", "10^{-30}", False),
    ("2^{100}+1", "2^{100}", False),
    ("2^{10000}+1", "2^{10000}", False),
    ("\\pi + 10^{-20}", "\\pi", False),
    ("e^{-51}", "e^{-50}", False),
    # ... also inside equations, intervals and lists of values
    ("x=\\frac{1}{21!}", "x=\\frac{1}{20!}", False),
    ("(\\frac{1}{21!}, 1)", "(\\frac{1}{20!}, 1)", False),
    ("\\frac{1}{21!}, 1", "\\frac{1}{20!}, 1", False),
    # exact values written differently are still equal
    ("\\frac{1}{20!}", "\\frac{1}{2432902008176640000}", True),
    ("x=\\frac{1}{2432902008176640000}", "x=\\frac{1}{20!}", True),
    ("\\sqrt{8}", "2\\sqrt{2}", True),
    ("2^{10}", "1024", True),
    ("2^{100}", "1267650600228229401496703205376", True),
    ("\\sqrt{5+2\\sqrt{6}}", "\\sqrt{2}+\\sqrt{3}", True),
    ("3\\ln 2", "\\ln 8", True),
    ("\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}", True),
    ("\\binom{5}{2}", "10", True),
    ("\\cos\\frac{\\pi}{3}", "\\frac{1}{2}", True),
    ("10\\%", "\\frac{1}{10}", True),
    # a float gold keeps math-verify's rounding to 6 decimals
    ("\\sqrt{2}", "1.414214", True),
]


@pytest.mark.parametrize("pred,gold,equal", CORPUS, ids=[f"{p}|{g}" for p, g, _ in CORPUS])
def test_regression_corpus(judge, pred, gold, equal):
    s = grade_math(f"so \\boxed{{{pred}}}", gold, judge=judge)
    assert s.status == ("ok" if equal else "wrong"), s
    assert s.value == (1.0 if equal else 0.0)


def test_plain_numbers_are_decided_exactly_without_the_judge():
    class NoJudge:
        def equivalent(self, pred, gold):
            raise AssertionError("plain numbers must not reach the judge")

    assert grade_math("\\boxed{1/3}", "0.333333", judge=NoJudge()).status == "wrong"
    assert grade_math("\\boxed{\\frac{1}{2}}", "0.5", judge=NoJudge()).status == "ok"
    assert grade_math("\\boxed{1,000}", "1000", judge=NoJudge()).status == "ok"


def test_strict_checker_never_calls_the_judge():
    class NoJudge:
        def equivalent(self, pred, gold):
            raise AssertionError("strict must not reach the judge")

    assert grade_math("\\boxed{5!}", "120", checker="strict", judge=NoJudge()).status == "wrong"
    with pytest.raises(ValueError, match="checker"):
        grade_math("\\boxed{1}", "1", checker="sympy")


def _timed_grade(judge, out: list) -> None:
    start = time.monotonic()
    out.append((grade_math(f"\\boxed{{{TOWER}}}", "5", judge=judge), time.monotonic() - start))


def _assert_pathological(score) -> None:
    # Breaking the judge is no escape from a negative advantage: a scored 0, not "unscorable".
    assert (score.status, score.value, score.extracted) == ("pathological", 0.0, TOWER), score
    assert score.info["reason"].startswith(f"judging this answer overran the {DEADLINE_S:g} s deadline")


def test_pathological_answer_scores_zero_within_deadline_on_main_thread(judge):
    judge.equivalent("1+1", "2")  # warm: the deadline covers grading, not interpreter start
    out: list = []
    _timed_grade(judge, out)
    score, took = out[0]
    _assert_pathological(score)
    assert took < BOUND_S  # the overrun, a fresh worker and the control comparison
    # The judge recovers: a fresh worker answers the next request.
    assert grade_math("\\boxed{5!}", "120", judge=judge).status == "ok"


def test_pathological_answer_scores_zero_within_deadline_on_worker_thread(judge):
    judge.equivalent("1+1", "2")
    out: list = []
    th = threading.Thread(target=_timed_grade, args=(judge, out))
    th.start()
    th.join(timeout=60)
    assert not th.is_alive()
    score, took = out[0]
    _assert_pathological(score)
    assert took < BOUND_S


def test_pathological_answer_scores_zero_within_deadline_in_another_process():
    code = (
        "import time, threading\n"
        "from rolecall.rewards import grade_math\n"
        "from rolecall.rewards.math_judge import MathJudge\n"
        f"j = MathJudge(deadline_s={DEADLINE_S})\n"
        "j.equivalent('1+1', '2')\n"
        "out = []\n"
        "def go():\n"
        "    t = time.monotonic()\n"
        f"    s = grade_math('\\\\boxed{{{TOWER}}}', '5', judge=j)\n"
        "    out.append((s.status, s.value, time.monotonic() - t))\n"
        "th = threading.Thread(target=go); th.start(); th.join()\n"
        "print(*out[0])\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    status, value, took = res.stdout.split()
    assert (status, value) == ("pathological", "0.0") and float(took) < BOUND_S


# -- whose fault: stand-in workers speaking the judge's protocol --------------------------
# argv[1] = "<how>[_<scope>]": how the worker misbehaves (hang, crash, raise) on answers with
# a `^`, or on every request (scope "all", so also on the control: the gold against itself);
# scope "selfunequal" judges the gold unequal to itself; "no_start" exits before it is ready.
# Otherwise it compares strings.
FAKE_WORKER = """
import json, os, sys, time
how, _, scope = sys.argv[1].partition("_")
if how == "no":
    sys.exit(3)
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    if scope == "all" or "^" in req["pred"]:
        if how == "hang":
            time.sleep(600)
        if how == "crash":
            os._exit(1)
        if how == "raise":
            print(json.dumps({"id": req["id"], "error": "RecursionError: too deep"}), flush=True)
            continue
    equal = req["pred"] == req["gold"] and scope != "selfunequal"
    print(json.dumps({"id": req["id"], "equal": equal}), flush=True)
"""
FAKE_DEADLINE_S = 0.5


def _fake_judge(mode: str) -> MathJudge:
    return MathJudge(FAKE_DEADLINE_S, worker_command=[sys.executable, "-c", FAKE_WORKER, mode])


# (how the worker fails on the answer, the reason reported)
ANSWER_FAULTS = [
    ("hang", "judging this answer overran the 0.5 s deadline"),
    ("crash", "the judge crashed on this answer"),
    ("raise", "the judge raised on this answer (RecursionError: too deep)"),
]


@pytest.mark.parametrize("mode, reason", ANSWER_FAULTS, ids=[m for m, _ in ANSWER_FAULTS])
def test_an_answer_that_breaks_a_healthy_judge_is_pathological(mode, reason):
    j = _fake_judge(mode)
    try:
        start = time.monotonic()
        s = grade_math("\\boxed{x^{x^{x}}}", "y", judge=j)
        assert (s.status, s.value) == ("pathological", 0.0), s
        assert s.info["reason"] == f"{reason} (the gold answer against itself judges in time)"
        assert time.monotonic() - start < FAKE_DEADLINE_S + 8.0
        assert j.equivalent("y", "y") is True  # and it recovers
    finally:
        j.close()


# (how the worker fails, also on the control or on start, the reason reported)
JUDGE_FAULTS = [
    ("no_start", "the math judge's worker could not run (math judge worker did not start)"),
    ("hang_all", "judging this answer overran the 0.5 s deadline, and so did the control: "
                 "judging the gold answer against itself overran the 0.5 s deadline"),
    ("crash_all", "the judge crashed on this answer, and so did the control: "
                  "the judge crashed on the gold answer against itself"),
    ("raise_all", "the judge raised on this answer (RecursionError: too deep), and so did the control: "
                  "the judge raised on the gold answer against itself (RecursionError: too deep)"),
    ("hang_selfunequal", "judging this answer overran the 0.5 s deadline, and the gold answer "
                         "does not judge equal to itself"),
]


@pytest.mark.parametrize("mode, reason", JUDGE_FAULTS, ids=[m for m, _ in JUDGE_FAULTS])
def test_a_judge_or_gold_fault_stays_unscorable(mode, reason):
    j = _fake_judge(mode)
    try:
        s = grade_math("\\boxed{x^{x^{x}}}", "y", judge=j)
        assert (s.status, s.value, s.info["reason"]) == ("unscorable", None, reason), s
        assert j.equivalent("x^{2}", "y") is None  # the single-comparison API is unchanged
    finally:
        j.close()


def test_the_trainer_counts_pathological_answers_as_scored_zeros():
    from rolecall.rewards.verifier import MathVerifier
    from rolecall.algo.scoring import score
    from rolecall.types import Episode, Problem

    prob = Problem("p", "what is y?", "y", {"kind": "math"})
    finals = ["\\boxed{y}", "\\boxed{z}", "\\boxed{x^{x^{x}}}", "no box"]
    eps = [Episode(problem=prob, sample=i, final_answer=f) for i, f in enumerate(finals)]
    v = MathVerifier(deadline_s=FAKE_DEADLINE_S)
    v._judge = _fake_judge("hang")
    try:
        metrics = score(eps, v)
    finally:
        v.close()
    assert [e.status for e in eps] == ["ok", "wrong", "pathological", "no_answer"]
    assert [e.reward for e in eps] == [1.0, 0.0, 0.0, 0.0]
    assert metrics["reward/status_pathological"] == 0.25 and "reward/status_unscorable" not in metrics
    assert "overran" in eps[2].verdict["reason"]


def test_judge_rejects_a_non_positive_deadline():
    with pytest.raises(ValueError, match="deadline_s"):
        MathJudge(deadline_s=0)
