"""task.name=reasoning_gym and reward.name=reasoning_gym: config checks at load, a disjoint and
deterministic split from distinct seeds, entries as JSON data, scoring by reasoning-gym's own
score_answer in a killable worker (deadline overruns included), and one training step."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time

import pytest

import rolecall
from rolecall.config import ConfigError, load_config
from rolecall.rewards.verifier import build_verifier
from rolecall.rewards.verifiers.reasoning_gym import ReasoningGymVerifier
from rolecall.tasks import get_task
from rolecall.tasks.reasoning_gym import split_seeds
from rolecall.types import Problem

pytest.importorskip("reasoning_gym")

GYM = ["task.name=reasoning_gym", "reward.name=reasoning_gym", "task.gym=basic_arithmetic"]
SMALL = [*GYM, "task.n_val=20", "task.gym_train_size=200"]


def _problems(*extra):
    cfg = load_config(None, [*SMALL, *extra])
    told = []
    train, val = get_task("reasoning_gym").problems(cfg, None, told.append)
    return cfg, train, val, told


# ---------------------------------------------------------------- config checks at load

def test_a_gym_and_its_options_load():
    cfg = load_config(None, [*GYM, "task.gym_options={min_terms: 2, max_terms: 2}"])
    assert (cfg.task.gym, cfg.task.gym_options) == ("basic_arithmetic", {"min_terms": 2, "max_terms": 2})


def test_an_unknown_gym_names_close_ones_and_how_to_list_them():
    with pytest.raises(ConfigError, match="task.gym: unknown reasoning-gym dataset 'basic_arithmetc'") as e:
        load_config(None, [*GYM, "task.gym=basic_arithmetc"])
    assert "basic_arithmetic" in str(e.value) and "reasoning_gym.factory.DATASETS" in str(e.value)


def test_bad_options_are_reasoning_gyms_error_naming_task_gym_options():
    with pytest.raises(ConfigError, match="task.gym_options: reasoning-gym refused") as e:
        load_config(None, [*GYM, "task.gym_options={min_terms: 5, max_terms: 2}"])
    assert "max_terms must be >= min_terms" in str(e.value)  # its own validate()
    assert "min_terms" in str(e.value)  # and the dataset's options


# Each option against the type its config dataclass declares: reasoning-gym itself would read
# "no" as true (negatives generated) and fail on 1.5 deep in its generator.
@pytest.mark.parametrize("gym, options, name, said", [
    ("basic_arithmetic", "{allow_negation: 'no'}", "allow_negation", "'no' is not true or false (bool)"),
    ("basic_arithmetic", "{min_digits: 1.5}", "min_digits", "1.5 is not a whole number (int)"),
    ("basic_arithmetic", "{min_digits: true}", "min_digits", "True is not a whole number (int)"),
    ("basic_arithmetic", "{min_terms: null}", "min_terms", "None is not a whole number (int)"),
    ("basic_arithmetic", "{format_style: fancy}", "format_style", "'fancy' is not one of 'simple', 'natural'"),
    ("basic_arithmetic", "{no_such_option: 1}", "no_such_option", "unknown option of 'basic_arithmetic'"),
    ("basic_arithmetic", "{min_term: 2}", "min_term", "did you mean min_terms"),
    ("complex_arithmetic", "{operations: '+-'}", "operations", "'+-' is not a list of str"),
    ("complex_arithmetic", "{operations: ['+', 1]}", "operations", "is not a list of str"),
    ("binary_alternation", "{p_solvable: .nan}", "p_solvable", "must be a finite number"),
    ("rearc", "{rng_difficulty_ranges: [[0, 1, 2]]}", "rng_difficulty_ranges", "not a list of tuple[float, float]"),
])
def test_options_are_type_checked_against_the_datasets_config(gym, options, name, said):
    with pytest.raises(ConfigError) as e:
        load_config(None, [*GYM, f"task.gym={gym}", f"task.gym_options={options}"])
    line = next(x for x in str(e.value).splitlines() if f"task.gym_options.{name}" in x)
    assert said in line, line


@pytest.mark.parametrize("gym, options", [
    ("basic_arithmetic", "{allow_negation: false, min_digits: 2, max_digits: 2, format_style: natural}"),
    ("complex_arithmetic", "{operations: ['+', '-']}"),           # a list for tuple[str, ...]
    ("polynomial_multiplication", "{variables: [x, y]}"),         # tuple[str] used for any length
    ("calendar_arithmetic", "{tasks: null}"),                     # Optional
    ("binary_alternation", "{p_solvable: 1}"),                    # an int where a float is declared
    ("rearc", "{diff_ub: 0.3}"),                                  # declared int, defaults to a float
])
def test_options_of_the_declared_type_load(gym, options):
    load_config(None, [*GYM, f"task.gym={gym}", f"task.gym_options={options}"])


def test_seed_and_size_are_rolecalls_not_options():
    with pytest.raises(ConfigError, match=r"task.gym_options: \['seed', 'size'\] are set by rolecall"):
        load_config(None, [*GYM, "task.gym_options={seed: 1, size: 9}"])


def test_the_gym_is_required_and_only_for_this_task():
    with pytest.raises(ConfigError, match="task.gym: required when task.name is 'reasoning_gym'"):
        load_config(None, ["task.name=reasoning_gym", "reward.name=reasoning_gym"])
    with pytest.raises(ConfigError, match="task.gym / task.gym_options are set but task.name is 'arithmetic'"):
        load_config(None, ["task.gym=basic_arithmetic"])


def test_the_task_refuses_another_verifier_and_the_verifier_reads_answer_from():
    with pytest.raises(ConfigError, match="reward.name: the reasoning_gym task is graded by 'reasoning_gym', got 'math'"):
        load_config(None, ["task.name=reasoning_gym", "task.gym=basic_arithmetic"])
    assert load_config(None, [*GYM, "reward.answer_from=boxed_or_last_line"]).reward.answer_from == "boxed_or_last_line"


def test_a_missing_package_names_the_extra_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # `import reasoning_gym` now raises ImportError
    with pytest.raises(ConfigError, match=r"needs the reasoning-gym package: pip install 'rolecall\[reasoning-gym\]'"):
        load_config(None, GYM)


def test_rolecall_and_other_tasks_never_import_reasoning_gym():
    code = ("import sys, rolecall\nfrom rolecall.config import load_config\nload_config(None, [])\n"
            "from rolecall.tasks import task_names\nassert 'reasoning_gym' in task_names()\n"
            "print('reasoning_gym' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---------------------------------------------------------------- the split

def test_validation_and_training_come_from_distinct_seeds_and_never_share_a_question():
    cfg, train, val, told = _problems()
    assert len(val) == 20 and 0 < len(train) <= 200
    val_seed, train_seed = split_seeds(cfg.task.seed, 20, 200)
    assert val_seed == cfg.task.seed and train_seed != val_seed
    # reasoning-gym draws item i from seed + i: the two ranges of item seeds do not overlap
    assert not set(range(val_seed, val_seed + 20)) & set(range(train_seed, train_seed + 200))
    assert not {p.prompt for p in val} & {p.prompt for p in train}
    assert len({p.uid for p in train + val}) == len(train) + len(val)
    assert any("20 validation problems, distinct (seed=1234, " in t for t in told)


def test_overlapping_seed_ranges_are_moved_apart():
    # Every hashed seed is below 2**32: a training range of 2**41 items reaches a validation seed of 2**40,
    # so training then starts right after validation's range.
    assert split_seeds(2**40, 10, 2**41) == (2**40, 2**40 + 10)
    assert split_seeds(2**40, 10, 100)[1] < 2**32  # no overlap: the hashed seed stands


def test_a_small_problem_space_drops_training_questions_seen_in_validation():
    one_digit = "task.gym_options={min_terms: 2, max_terms: 2, min_digits: 1, max_digits: 1}"
    _, train, val, told = _problems(one_digit, "task.n_val=100", "task.gym_train_size=300")
    assert not {p.prompt for p in val} & {p.prompt for p in train}
    dropped = 300 - len(train)
    assert dropped > 0 and any(f"{dropped} dropped as validation questions" in t for t in told)


def test_the_split_is_deterministic_and_follows_the_seed():
    _, train_a, val_a, _ = _problems()
    _, train_b, val_b, _ = _problems()
    assert (train_a, val_a) == (train_b, val_b)
    _, train_c, val_c, _ = _problems("task.seed=99")
    assert [p.prompt for p in val_c] != [p.prompt for p in val_a]
    assert [p.prompt for p in train_c] != [p.prompt for p in train_a]


def test_problems_carry_their_entry_as_json_data_and_the_fingerprint_names_the_source():
    cfg, train, val, _ = _problems()
    p = val[0]
    assert p.meta["gym"] == "basic_arithmetic" and p.meta["gym_options"] == {}
    assert p.prompt == p.meta["entry"]["question"] and p.answer == p.meta["entry"]["answer"]
    assert json.loads(json.dumps(p.meta)) == p.meta  # what the scoring worker receives is what is stored
    ident = get_task("reasoning_gym").identity(cfg)
    assert ident["path"] == "reasoning-gym 0.1.25" and "basic_arithmetic" in ident["task"]


def test_entries_that_are_not_json_data_are_refused(monkeypatch):
    import rolecall.tasks.reasoning_gym as rg_task

    class NotJson:
        def __getitem__(self, i):
            return {"question": f"q{i}", "answer": "1", "metadata": {"values": {1, 2}}}  # a set

    monkeypatch.setattr(rg_task, "dataset", lambda *args: NotJson())
    with pytest.raises(ValueError, match="'basic_arithmetic' validation item 0 is not JSON data"):
        _problems()


def test_entries_whose_scoring_does_not_survive_json_are_refused():
    # arc_agi compares tuples in score_answer: after a JSON round trip its gold scores 0.05, not 1.
    cfg = load_config(None, ["task.name=reasoning_gym", "reward.name=reasoning_gym", "task.gym=arc_agi",
                             "task.n_val=1", "task.gym_train_size=1"])
    with pytest.raises(ValueError, match="'arc_agi' entries do not survive JSON"):
        get_task("reasoning_gym").problems(cfg, None, lambda text: None)


# ---------------------------------------------------------------- scoring

@pytest.fixture(scope="module")
def val_problems():
    return _problems()[2]


def test_the_gold_answer_scores_1_and_a_wrong_one_0(val_problems):
    cfg = load_config(None, SMALL)
    v = build_verifier(cfg.reward_cfg())
    try:
        p, q = val_problems[:2]
        right, wrong, none = v.score_many([f"so \\boxed{{{p.answer}}}", f"\\boxed{{{int(q.answer) + 1}}}",
                                           f"it is {p.answer}"], [p, q, p])
    finally:
        v.close()
    assert (right.value, right.status, right.extracted) == (1.0, "ok", p.answer)
    assert (wrong.value, wrong.status) == (0.0, "wrong")
    assert (none.value, none.status) == (0.0, "no_answer")  # answer_from: boxed (the default)
    assert "extracted_from" not in right.info


def test_answer_from_falls_back_only_without_a_box_and_says_so(val_problems):
    p = val_problems[0]
    v = ReasoningGymVerifier(answer_from="boxed_or_last_number", format_penalty=0.5)
    try:
        number, boxed, unclosed, nothing = v.score_many(
            [f"The answer is {p.answer}.", f"{p.answer} or \\boxed{{{int(p.answer) + 1}}}",
             f"{p.answer} \\boxed{{{p.answer}", "no idea"], [p] * 4)
    finally:
        v.close()
    assert (number.value, number.status, number.extracted, number.info["extracted_from"]) == (
        1.0, "ok", p.answer, "last_number")
    assert (boxed.status, boxed.info["extracted_from"]) == ("wrong", "boxed")
    assert (unclosed.value, unclosed.status) == (-0.5, "no_answer")  # a box was begun: no fallback
    assert (nothing.value, nothing.status, nothing.info["extracted_from"]) == (-0.5, "no_answer", "none")


# A worker whose score_answer sleeps: for the answer SLOW, or for every answer when the entry's
# gold is SLOW too. The patch runs in the worker process, then the real worker's main().
SLOW_WORKER = """
import time
from reasoning_gym.factory import DATASETS
cls = DATASETS["basic_arithmetic"][0]
real = cls.score_answer
def slow(self, answer, entry):
    if answer == "SLOW":
        time.sleep(60)
    return real(self, answer, entry)
cls.score_answer = slow
from rolecall.rewards.reasoning_gym_worker import main
main()
"""


def test_an_overrun_on_the_answer_is_pathological_and_on_the_gold_unscorable(val_problems):
    p = val_problems[0]
    v = ReasoningGymVerifier(deadline_s=1.0, worker_command=[sys.executable, "-c", SLOW_WORKER])
    try:
        t = time.monotonic()
        slow = v.score_many(["\\boxed{SLOW}"], [p])[0]
        assert time.monotonic() - t < 30  # the deadline, a restart and the control; never the 60 s sleep
        assert (slow.value, slow.status) == (0.0, "pathological")
        assert "overran the 1 s deadline (the gold answer scores in time)" in slow.info["reason"]
        assert v.score_many([f"\\boxed{{{p.answer}}}"], [p])[0].status == "ok"  # a fresh worker goes on
        broken = dataclasses.replace(p, meta={**p.meta, "entry": {**p.meta["entry"], "answer": "SLOW"}})
        fault = v.score_many(["\\boxed{SLOW}"], [broken])[0]
        assert (fault.value, fault.status) == (None, "unscorable")
        assert "and so did the control" in fault.info["reason"]
    finally:
        v.close()


def test_a_problem_without_an_entry_is_unscorable():
    v = ReasoningGymVerifier()
    s = v.score_many(["\\boxed{1}"], [Problem("x", "1+0", "1")])[0]
    assert (s.value, s.status) == (None, "unscorable")


# ---------------------------------------------------------------- one training step

def test_one_training_step_on_a_reasoning_gym_task(tiny_model_dir, tmp_path):
    cfg = {"model": {"path": str(tiny_model_dir)},
           "task": {"name": "reasoning_gym", "gym": "basic_arithmetic", "gym_options": {"max_terms": 2},
                    "n_val": 2, "gym_train_size": 8},
           # every non-empty reply is then scored by the worker (the tiny model never boxes)
           "reward": {"name": "reasoning_gym", "answer_from": "boxed_or_last_line"},
           "rollout": {"problems_per_step": 2, "group_size": 2, "max_new_tokens": 4},
           "train": {"steps": 1, "val_every": 1, "checkpoint_every": 1}}
    run = rolecall.train_run(cfg, tmp_path / "r", notify=lambda text: None)
    rows = [r for r in run.metrics if "reward/mean" in r]
    assert [r["step"] for r in rows] == [1]
    assert any("val/accuracy" in r for r in run.metrics)
    statuses = {k for k in rows[0] if k.startswith("reward/status_")}
    assert statuses and "reward/status_unscorable" not in statuses, rows[0]
    samples = [json.loads(x) for x in (run.path / "samples.jsonl").read_text().splitlines() if x.strip()]
    assert samples and all(s["uid"].startswith("basic_arithmetic/") for s in samples)


def test_validation_questions_are_distinct_even_where_items_repeat():
    # Two-term one-digit sums: 200 questions in all, so 100 items hold repeats; validation takes distinct ones.
    one_digit = "task.gym_options={min_terms: 2, max_terms: 2, min_digits: 1, max_digits: 1}"
    _, train, val, told = _problems("task.gym=chain_sum", one_digit, "task.n_val=100", "task.gym_train_size=300")
    assert len(val) == len({p.prompt for p in val}) == 100
    drawn = int(next(t for t in told if "drawn" in t).split(" drawn")[0].rsplit(" ", 1)[-1])
    assert drawn > 100  # some items were repeats and were skipped
    assert not {p.prompt for p in val} & {p.prompt for p in train}


def test_more_validation_questions_than_the_space_holds_is_refused_naming_the_count():
    one_digit = "task.gym_options={min_terms: 2, max_terms: 2, min_digits: 1, max_digits: 1}"
    with pytest.raises(ValueError, match=r"task.n_val=201: .* made only 200 distinct questions"):
        _problems("task.gym=chain_sum", one_digit, "task.n_val=201", "task.gym_train_size=10")


def test_question_space_counts_distinct_questions_and_says_when_it_saturated():
    from rolecall.tasks.reasoning_gym import question_space

    small = question_space("chain_sum", {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}, 5000)
    assert small == {"draws": 5000, "distinct": 200, "saturated": True}
    big = question_space("chain_sum", {"min_terms": 2, "max_terms": 2, "min_digits": 3, "max_digits": 3}, 500)
    assert big["distinct"] > 490 and not big["saturated"]
