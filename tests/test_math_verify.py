"""math-verify equivalence in a killable worker: known pitfalls (different factorials, lists
of values, `\\text{13}` vs `13`, bold answers, intervals vs inequalities) and a hard deadline
that holds from the main thread, a worker thread and another process."""
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


def test_pathological_answer_is_unscorable_within_deadline_on_main_thread(judge):
    judge.equivalent("1+1", "2")  # warm: the deadline covers grading, not interpreter start
    out: list = []
    _timed_grade(judge, out)
    score, took = out[0]
    assert score.status == "unscorable" and score.value is None
    assert took < BOUND_S
    # The judge recovers: a fresh worker answers the next request.
    assert grade_math("\\boxed{5!}", "120", judge=judge).status == "ok"


def test_pathological_answer_is_unscorable_within_deadline_on_worker_thread(judge):
    judge.equivalent("1+1", "2")
    out: list = []
    th = threading.Thread(target=_timed_grade, args=(judge, out))
    th.start()
    th.join(timeout=60)
    assert not th.is_alive()
    score, took = out[0]
    assert score.status == "unscorable" and took < BOUND_S


def test_pathological_answer_is_unscorable_within_deadline_in_another_process():
    code = (
        "import time, threading\n"
        "from rolecall.rewards import grade_math\n"
        "from rolecall.rewards.math_judge import MathJudge\n"
        f"j = MathJudge(deadline_s={DEADLINE_S})\n"
        "j.equivalent('1+1', '2')\n"
        "out = []\n"
        "def go():\n"
        "    t = time.monotonic()\n"
        f"    out.append((grade_math('\\\\boxed{{{TOWER}}}', '5', judge=j).status, time.monotonic() - t))\n"
        "th = threading.Thread(target=go); th.start(); th.join()\n"
        "print(out[0][0], out[0][1])\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    status, took = res.stdout.split()
    assert status == "unscorable" and float(took) < BOUND_S


def test_judge_rejects_a_non_positive_deadline():
    with pytest.raises(ValueError, match="deadline_s"):
        MathJudge(deadline_s=0)
