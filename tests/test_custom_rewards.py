"""A user's reward function (`reward.name: package.module:function`): isolation, deadlines, errors."""
from __future__ import annotations

import json
import tempfile
import textwrap
from pathlib import Path

import pytest

from rolecall.config import ConfigError, RewardCfg, load_config
from rolecall.rewards.verifier import build_verifier
from rolecall.types import Problem

P = Problem(uid="p1", prompt="2+3", answer="5", meta={"kind": "math"})

MODULE = '''
import os, time
from rolecall.rewards.base import Score

def exact(problem, answer):
    return 1.0 if answer.strip() == problem.answer else 0.0

def moody(problem, answer):
    if answer == "hang":
        time.sleep(60)
    if answer == "die":
        os._exit(3)
    if answer == "raise":
        raise RuntimeError("no idea")
    if answer == "text":
        return "great"
    if answer == "none":
        return None
    if answer == "nan":
        return float("nan")
    if answer == "score":
        return Score(0.25, "partial", extracted="x", info={"why": "close"})
    print("chatter on stdout must not break the protocol")
    return len(answer) / 10

def by_turns(problem, answer, episode):
    # pays for a short debate: 1 / number of turns, and says which roles spoke
    return Score(1.0 / len(episode.turns), "ok", info={"roles": [t.role for t in episode.turns],
                                                      "sample": episode.sample})

class Counter:
    def __init__(self):
        self.n = 0
    def __call__(self, problem, answer):
        self.n += 1
        return float(self.n)
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "my_rewards.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.chdir(tmp_path)  # the module sits next to the user, as in their project
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # a reward's temporary log stays in the test's folder
    return tmp_path


def _verifier(name: str, deadline: float = 2.0, **options):
    return build_verifier(RewardCfg(name=name, custom_deadline_s=deadline, **options))


def test_a_function_scores_answers(user_module):
    v = _verifier("my_rewards:exact")
    try:
        assert [s.value for s in v.score_many(["5", "6", " 5 "], [P, P, P])] == [1.0, 0.0, 1.0]
        assert v.name == "my_rewards:exact"
    finally:
        v.close()


def test_a_class_is_made_once_per_process_and_called_per_answer(user_module):
    v = _verifier("my_rewards:Counter", custom_workers=1)
    try:
        assert [s.value for s in v.score_many(["a", "b", "c"], [P] * 3)] == [1.0, 2.0, 3.0]
        assert [s.value for s in v.score_many(["d"], [P])] == [4.0]
    finally:
        v.close()


def test_failures_are_unscorable_never_zero_and_the_worker_recovers(user_module):
    v = _verifier("my_rewards:moody", deadline=1.0)
    try:
        answers = ["hang", "abcd", "die", "raise", "text", "none", "score", "abcdef"]
        scores = v.score_many(answers, [P] * len(answers))
        by = dict(zip(answers, scores))
        assert by["hang"].value is None and "overran its 1 s deadline" in by["hang"].info["reason"]
        assert by["die"].value is None and "process died (exit code 3)" in by["die"].info["reason"]
        assert by["raise"].value is None and "RuntimeError: no idea" in by["raise"].info["reason"]
        assert by["text"].value is None and "returned str" in by["text"].info["reason"]
        assert by["none"].value is None and by["none"].status == "unscorable"
        assert {a: by[a].status for a in ("hang", "die", "raise", "text")} == {
            "hang": "timeout", "die": "crashed", "raise": "raised", "text": "bad_value"}
        assert (by["score"].value, by["score"].status, by["score"].info) == (0.25, "partial", {"why": "close"})
        # after every failure a fresh worker scores the next answer
        assert by["abcd"].value == pytest.approx(0.4) and by["abcdef"].value == pytest.approx(0.6)
    finally:
        v.close()


def test_a_nan_reward_is_a_bad_value_left_out_of_the_statistics(user_module):
    from rolecall.algo.scoring import score
    from rolecall.types import Episode

    v = _verifier("my_rewards:moody")
    try:
        ep = Episode(problem=P, sample=0, final_answer="nan")
        m = score([ep], v)
    finally:
        v.close()
    assert ep.reward is None and ep.status == "bad_value" and m["reward/status_bad_value"] == 1.0
    assert "returned nan" in ep.verdict["reason"]


@pytest.mark.parametrize("name, message", [
    ("my_rewards:missing", "cannot load 'my_rewards:missing': AttributeError"),
    ("no_such_module:f", "cannot load 'no_such_module:f': ModuleNotFoundError: No module named 'no_such_module'"),
])
def test_a_function_that_cannot_be_loaded_fails_at_start_naming_it(user_module, name, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _verifier(name)


@pytest.mark.parametrize("name", ["mathx", "my_rewards:", ":f", "my rewards:f", "a.b:c-d"])
def test_a_bad_reward_name_is_refused_at_config_load(name):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="package.module:function"):
        RewardCfg(name=name)
    with pytest.raises(ConfigError, match="reward.name: .*mathx"):
        load_config(None, ["reward.name=mathx"])


def test_a_custom_reward_may_grade_any_dataset_format():
    cfg = load_config(None, ["task.name=multihop", "reward.name=my_rewards:exact"])
    assert cfg.reward.name == "my_rewards:exact"


def test_training_with_the_shipped_example_reward(tiny_model_dir, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from rolecall.cli import app

    monkeypatch.chdir(Path(__file__).parent.parent)  # examples/ is importable from the repository root
    out = tmp_path / "r"
    res = CliRunner().invoke(app, ["train", f"model.path={tiny_model_dir}", "reward.name=examples.closeness_reward:closeness",
                                   "rollout.problems_per_step=2", "rollout.group_size=2", "task.n_val=4",
                                   "rollout.max_new_tokens=4", "--steps", "2", "--out", str(out)])
    assert res.exit_code == 0, res.output
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "reward/mean" in r] == [1, 2]
    fp = json.loads((out / "fingerprint.json").read_text())["reward"]
    assert fp["name"] == "examples.closeness_reward:closeness" and len(fp["source"]) >= 16


def test_the_example_reward_by_hand():
    from examples.closeness_reward import Strict, closeness

    assert closeness(P, r"\boxed{5}") == 1.0 and closeness(P, r"\boxed{4}") == 0.5
    assert closeness(P, r"\boxed{9}") == 0.0 and closeness(P, "five") == 0.0
    assert closeness(Problem("q", "x", "Paris"), r"\boxed{Paris}") is None
    s = Strict()
    assert s(P, r"\boxed{5}") == 1.0 and s.calls == 1


def test_a_function_that_takes_the_episode_sees_every_turn(user_module):
    from rolecall.algo.scoring import score
    from rolecall.types import Episode, Turn

    def ep(sample, roles):
        turns = [Turn(role=r, slot=r, policy=r, prompt_text="p", completion_text="c", index=i) for i, r in enumerate(roles)]
        return Episode(problem=P, sample=sample, turns=turns, final_answer="5")

    v = _verifier("my_rewards:by_turns")
    try:
        assert v.wants_episode
        eps = [ep(0, ["generator", "aggregator"]), ep(1, ["generator", "generator", "generator", "aggregator"])]
        score(eps, v)  # the same final answer, two episodes: scored apart, each with its own turns
    finally:
        v.close()
    assert [e.reward for e in eps] == [0.5, 0.25]
    assert eps[1].verdict == {"roles": ["generator"] * 3 + ["aggregator"], "sample": 1}
    plain = _verifier("my_rewards:exact")
    try:
        assert not plain.wants_episode
    finally:
        plain.close()
