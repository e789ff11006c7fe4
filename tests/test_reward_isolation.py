"""A custom reward cannot go mute, hang the run or fail in silence: what it prints goes to its log,
its calls run at once under a deadline, and every failure is unscorable, named and said once."""
from __future__ import annotations

import json
import tempfile
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from rolecall.config import RewardCfg, load_config
from rolecall.rewards.base import Score
from rolecall.rewards.verifier import build_verifier
from rolecall.types import Episode, Problem

P = Problem(uid="p1", prompt="2+3", answer="5", meta={})

MODULE = '''
import os, subprocess, sys, time, zlib
from pathlib import Path
from rolecall.rewards.base import Score

print("hello at import")  # chatter while loading: the log, not the protocol

def noisy(problem, answer):
    subprocess.run(["echo", "from echo " + answer])   # a checker that prints on stdout
    os.write(1, b"raw fd one\\n")
    print("printed", answer)
    subprocess.run(["sh", "-c", "echo child stderr >&2"])
    assert sys.stdin.read() == ""                       # no request can be read from here
    subprocess.run(["cat"], timeout=5)                  # nor by a program it starts
    return 1.0

def hang(problem, answer):
    child = subprocess.Popen(["sleep", "60"])
    Path(os.environ["PID_DIR"], answer).write_text(str(child.pid))
    time.sleep(60)

def half(problem, answer):
    if int(answer[1:]) % 2:
        raise RuntimeError("cannot grade " + answer)
    return Score(1.0, "ok", info={"pid": os.getpid()})

VALUES = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf"), "huge": 1e308, "-huge": -1e308,
          "str": "great", "list": [1.0], "bigint": 10 ** 400, "score_nan": Score(float("nan"), "ok"),
          "score_str": Score("x", "ok"), "true": True, "false": False, "ten": 10, "over": 10.5, "half": 0.5}

def value(problem, answer):
    if answer == "numpy":
        import numpy
        return numpy.float32(0.25)
    return VALUES[answer]

def crash(problem, answer):
    print("last words before", answer)
    os._exit(3)

def by_parity(problem, answer):
    # scorable (and right) on half the problems, raises on the others; a checker that prints
    subprocess.run(["echo", "checking " + problem.uid])
    if zlib.crc32(problem.uid.encode()) % 2:
        raise ValueError("no gold for " + problem.uid)
    return 1.0

def forever(problem, answer):
    time.sleep(30)
    return 1.0
'''


@pytest.fixture
def rewards(tmp_path, monkeypatch):
    (tmp_path / "iso_rewards.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.chdir(tmp_path)  # the module sits next to the user, as in their project
    monkeypatch.setenv("PID_DIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # a reward's temporary log stays in the test's folder
    return tmp_path


def _verifier(name: str, deadline: float = 5.0, **options):
    return build_verifier(RewardCfg(name=f"iso_rewards:{name}", custom_deadline_s=deadline, **options))


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")  # a zombie waits only for its reaper


def test_what_a_reward_and_its_programs_print_goes_to_its_log(rewards):
    v = _verifier("noisy", custom_workers=3)
    try:
        scores = v.score_many([f"a{i}" for i in range(5)], [P] * 5)
        assert [(s.value, s.status) for s in scores] == [(1.0, "ok")] * 5
        temporary = v.log.path
        assert temporary.is_file() and v.log.temporary
        run = rewards / "run"
        run.mkdir()
        assert v.log_to(run) == run / "reward.log"
        assert not temporary.exists()  # moved, not copied and left behind
        assert [s.value for s in v.score_many(["after"], [P])] == [1.0]
        assert v.drain_notices() == []  # nothing went wrong: nothing to say
    finally:
        v.close()
    log = (run / "reward.log").read_text()
    for line in ["hello at import", "from echo a0", "from echo a4", "raw fd one", "printed a3", "child stderr",
                 "from echo after"]:
        assert line in log, log
    assert "[worker 1]" in log and "[rolecall]" in log


def test_hanging_calls_run_at_once_and_die_with_what_they_started(rewards):
    n, deadline = 6, 1.0
    v = _verifier("hang", deadline, custom_workers=n)
    try:
        t0 = time.monotonic()
        scores = v.score_many([f"h{i}" for i in range(n)], [P] * n)
        took = time.monotonic() - t0
        assert [s.status for s in scores] == ["timeout"] * n and all(s.value is None for s in scores)
        assert "overran its 1 s deadline" in scores[0].info["reason"]
        assert took < n * deadline, took  # at once: about one deadline, not one per call
        pids = [int((rewards / f"h{i}").read_text()) for i in range(n)]
        time.sleep(0.2)
        assert not any(_alive(pid) for pid in pids)  # the `sleep 60` each call started went with it
        notices = v.drain_notices()
        assert len(notices) == 1 and "overran its 1 s deadline" in notices[0] and str(v.log.path) in notices[0]
        assert "reward.custom_deadline_s" in notices[0]
        v.score_many(["h9"], [P])
        assert v.drain_notices() == []  # said once
    finally:
        v.close()


def test_a_batch_that_hangs_on_everything_stops_trying(rewards):
    n, deadline = 40, 0.5
    v = _verifier("hang", deadline, custom_workers=2)
    try:
        t0 = time.monotonic()
        scores = v.score_many([f"g{i}" for i in range(n)], [P] * n)
        took = time.monotonic() - t0
    finally:
        v.close()
    assert {s.status for s in scores} == {"timeout"}
    untried = [s for s in scores if s.info["reason"].startswith("not tried")]
    assert len(untried) >= n // 2, [s.info["reason"] for s in scores]
    assert took < n * deadline / 2, took  # far less than every call on two workers


def test_a_reward_that_raises_on_half_keeps_its_process_and_is_said_once(rewards):
    v = _verifier("half", custom_workers=1)
    try:
        scores = v.score_many([f"r{i}" for i in range(8)], [P] * 8)
        assert [s.status for s in scores] == ["ok", "raised"] * 4
        assert [s.value for s in scores[::2]] == [1.0] * 4
        assert "RuntimeError: cannot grade r1" in scores[1].info["reason"]
        assert len({s.info["pid"] for s in scores[::2]}) == 1  # a raise is one bad sample, not a dead worker
        notices = v.drain_notices()
        assert len(notices) == 1 and "raised on problem p1: RuntimeError: cannot grade r1" in notices[0]
        log = v.log.path.read_text()
        assert "Traceback" in log and "RuntimeError: cannot grade r7" in log
    finally:
        v.close()


BAD = ["nan", "inf", "-inf", "huge", "-huge", "str", "list", "bigint", "score_nan", "score_str", "over"]
GOOD = {"true": 1.0, "false": 0.0, "ten": 10.0, "half": 0.5, "numpy": 0.25}


def test_a_value_that_is_not_a_finite_number_in_range_is_a_bad_value(rewards):
    v = _verifier("value", custom_max_abs=10)
    try:
        answers = BAD + list(GOOD)
        by = dict(zip(answers, v.score_many(answers, [P] * len(answers))))
        notices = v.drain_notices()
    finally:
        v.close()
    for a in BAD:
        assert (by[a].value, by[a].status) == (None, "bad_value"), (a, by[a])
        assert "reward.custom_max_abs" in by[a].info["reason"]
    assert "returned 1e+308" in by["huge"].info["reason"] and "returned str 'great'" in by["str"].info["reason"]
    assert {a: (by[a].value, by[a].status) for a in GOOD} == {a: (x, "ok") for a, x in GOOD.items()}
    assert len(notices) == 1 and "bad_value" in notices[0] and "±10" in notices[0]


def test_a_crash_is_said_with_the_last_lines_it_printed(rewards):
    v = _verifier("crash")
    try:
        (s,) = v.score_many(["c1"], [P])
        notices = v.drain_notices()
    finally:
        v.close()
    assert (s.value, s.status) == (None, "crashed") and "exit code 3" in s.info["reason"]
    assert len(notices) == 1 and "its process died (exit code 3)" in notices[0]
    assert "| last words before c1" in notices[0]


def test_a_temporary_log_nobody_was_told_about_is_removed(rewards):
    v = _verifier("half")
    v.score_many(["r0"], [P])
    path = v.log.path
    v.close()
    assert not path.exists()
    v = _verifier("half")
    v.score_many(["r1"], [P])
    path = v.log.path
    assert v.drain_notices()
    v.close()
    assert path.exists()  # a notice named it
    path.unlink()


def test_huge_rewards_never_overflow_the_statistics():
    from rolecall.algo.scoring import score
    from rolecall.diagnostics.rollout_metrics import rollout_metrics

    class Huge:
        name = "huge"

        def score_many(self, completions, problems):
            return [Score({"a": 1e308, "b": 1e308, "c": 1.0}[c], "ok") for c in completions]

    eps = [Episode(P, i, [], final_answer=c) for i, c in enumerate("abc")]
    m = score(eps, Huge())
    assert [e.reward for e in eps] == [None, None, 1.0] and m["reward/status_nonfinite"] == pytest.approx(2 / 3)
    assert rollout_metrics(eps, signatures=False)["reward/mean"] == 1.0


def test_most_samples_unscorable_is_a_warning_whatever_the_run_length():
    from rolecall.train.step import notices

    said = ["reward x: a call overran its 1 s deadline"]
    stack = SimpleNamespace(cfg=load_config(None, []), verifier=SimpleNamespace(drain_notices=lambda: said))

    def eps(*statuses):
        return [Episode(P, i, [], reward=None if s != "ok" else 1.0, status=s) for i, s in enumerate(statuses)]

    out = notices(stack, "validation at step 0", eps("timeout", "timeout", "raised", "ok"), validation=True,
                  samples_file="val_samples.jsonl")
    assert out[0] == said[0]
    assert out[1].startswith("warning: validation at step 0: 3 of 4 samples unscorable by the math verifier "
                             "(timeout 2, raised 1); val/accuracy is over the 1 scorable ones")
    assert notices(stack, "step 2", eps("ok", "ok", "raised")) == said  # a minority: no warning
    (skipped,) = notices(SimpleNamespace(cfg=stack.cfg), "step 3", eps("ok", "raised"), skipped=True)
    assert "step 3: 1 of 2 samples unscorable" in skipped and "the step was skipped" in skipped


TINY = ["rollout.problems_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=4"]


def _rows(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


def test_validation_accuracy_is_over_the_scorable_samples(tiny_model_dir, rewards):
    from typer.testing import CliRunner

    from rolecall.cli import app

    out = rewards / "run"
    res = CliRunner().invoke(app, ["train", f"model.path={tiny_model_dir}", "reward.name=iso_rewards:by_parity",
                                   *TINY, "task.n_val=8", "--steps", "1", "--out", str(out)])
    assert res.exit_code == 0, res.output
    vals = [r for r in _rows(out) if "val/accuracy" in r]
    samples = [json.loads(x) for x in (out / "val_samples.jsonl").read_text().splitlines()]
    first = [s for s in samples if s["step"] == 0]
    assert len(first) == 8
    raised = sum(s["info"]["status"] == "raised" for s in first)
    assert raised == sum(s["reward"] is None for s in first)
    assert 0 < raised < 8  # both kinds among the validation problems
    # every scorable answer earns 1: accuracy over the scorable samples is 1, not their share
    assert [r["val/accuracy"] for r in vals] == [1.0, 1.0]
    assert vals[0]["val/unscorable_frac"] == raised / 8
    assert res.output.count("raised on problem") == 1  # the first raise, said once
    log = (out / "reward.log").read_text()
    assert "most recent call last" not in res.output and "ValueError: no gold for" in log and "checking " in log


def test_a_hanging_reward_says_so_at_once_and_accuracy_is_not_a_number(tiny_model_dir, rewards):
    from typer.testing import CliRunner

    from rolecall.cli import app

    out = rewards / "run"
    res = CliRunner().invoke(app, ["train", f"model.path={tiny_model_dir}", "reward.name=iso_rewards:forever",
                                   "reward.custom_deadline_s=0.5", *TINY, "task.n_val=4", "--steps", "1",
                                   "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert res.output.count("overran its 0.5 s deadline") == 1 and str(out / "reward.log") in res.output
    assert "warning: validation at step 0: 4 of 4 samples unscorable by the iso_rewards:forever verifier (timeout 4)" \
        in res.output
    assert "warning: step 1: 4 of 4 samples unscorable" in res.output and "the step was skipped" in res.output
    assert "val/accuracy n/a (no scorable sample" in res.output
    vals = [r for r in _rows(out) if "val/accuracy" in r]
    assert [(r["val/accuracy"], r["val/unscorable_frac"]) for r in vals] == [(None, 1.0), (None, 1.0)]
    assert json.loads((out / "summary.json").read_text())["accuracy"]["final"] is None
    assert "overran its 0.5 s deadline" in (out / "reward.log").read_text()

    res = CliRunner().invoke(app, ["eval", str(out)])
    assert res.exit_code == 0, res.output
    assert "overran its 0.5 s deadline" in res.output and "were unscorable" in res.output
    assert json.loads(res.stdout[res.stdout.index("{"):])["val/accuracy"] is None
