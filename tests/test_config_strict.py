"""Strict inputs: every config error fails before any model loads, naming
the dotted path, the bad value and what is allowed; nothing in a config, prompt file or
dataset is ever executed as code."""
from __future__ import annotations

import ast
import json
import time
from pathlib import Path

import pytest

import rolecall
from rolecall.config import ConfigError, load_config

SRC = Path(rolecall.__file__).parent


@pytest.fixture(autouse=True)
def no_model_loads(monkeypatch):
    """Any attempt to load weights or a tokenizer fails the test: validation must not need them."""
    import transformers

    import rolecall.policies.model as model

    def refuse(*a, **k):
        raise AssertionError("a model or tokenizer was loaded during config validation")
    for name in ("load_model", "load_tokenizer"):
        monkeypatch.setattr(model, name, refuse)
    for cls in (transformers.AutoModelForCausalLM, transformers.AutoTokenizer):
        monkeypatch.setattr(cls, "from_pretrained", refuse)


# (overrides, dotted path, the bad value as shown, a fragment of what is allowed)
BAD = [
    pytest.param(["rollout.group_sizes=3"], "rollout.group_sizes", "group_sizes", "'group_size'", id="unknown-key"),
    pytest.param(["rollouts.group_size=3"], "rollouts", "rollouts", "'rollout'", id="unknown-section"),
    pytest.param(["rollout.group_size=abc"], "rollout.group_size", "'abc'", "valid integer", id="wrong-type"),
    pytest.param(["train.steps=true"], "train.steps", "True", "a number", id="bool-for-number"),
    pytest.param(["rollout.max_new_tokens=2.5"], "rollout.max_new_tokens", "2.5", "valid integer", id="fraction"),
    pytest.param(["rollout.max_new_tokens=0"], "rollout.max_new_tokens", "0", "greater than 0", id="zero-size"),
    pytest.param(["rollout.max_batch=-4"], "rollout.max_batch", "-4", "greater than 0", id="negative-size"),
    pytest.param(["optim.lr=0"], "optim.lr", "0", "greater than 0", id="zero-lr"),
    pytest.param(["rollout.episode_timeout_s=0"], "rollout.episode_timeout_s", "0", "greater than 0", id="zero-timeout"),
    pytest.param(["train.max_nonfinite_steps=0"], "train.max_nonfinite_steps", "0", "greater than 0",
                 id="zero-nonfinite-limit"),
    pytest.param(["model.dtype=float64"], "model.dtype", "'float64'", "'bfloat16'", id="literal"),
    pytest.param(["train.sinks=[csv]"], "train.sinks.0", "'csv'", "'tensorboard'", id="list-item"),
    pytest.param(["routing=sideways"], "routing", "'sideways'", "'isolated' or 'shared'", id="routing-form"),
    pytest.param(["routing={generator: g, aggregator: a}", "policies={g: {}}"], "routing", "aggregator -> a",
                 "defined policies: ['g']", id="route-to-missing-policy"),
    pytest.param(["routing={generator: g, aggregator: g, judge: g}"], "routing", "'judge'", "'generator'",
                 id="route-for-missing-role"),
    pytest.param(["workflow.name=nope"], "workflow.name", "'nope'", "'voting'", id="unknown-workflow"),
    pytest.param(["workflow.prompts=nope"], "workflow.prompts", "'nope'", "'math'", id="unknown-prompt-set"),
    pytest.param(["workflow.options={n_voters: 0}"], "workflow.options.n_voters", "0", ">= 1", id="workflow-option"),
    pytest.param(["algo.estimator=ppo"], "algo.estimator", "'ppo'", "'grpo'", id="unknown-estimator"),
    pytest.param(["rollout.max_new_tokens_by_role={judge: 8}"], "rollout.max_new_tokens_by_role", "'judge'",
                 "'generator'", id="budget-for-missing-role"),
    pytest.param(["rollout.group_size=1"], "rollout.group_size", "1", ">= 2", id="group-of-one"),
    pytest.param(["rollout.problems_per_step=2", "rollout.group_size=2", "algo.mini_batches=5"], "algo.mini_batches",
                 "5", "1..4", id="empty-mini-batches"),
    pytest.param(["task.name=dataset", "data.path=rows.jsonl", "data.format=deepcoder"], "reward.name", "'math'",
                 "'code'", id="verifier-for-data"),
    pytest.param(["task.name=dataset", "data.path=rows.jsonl", "data.test_fraction=0"], "data.test_fraction", "0",
                 "data.val_path", id="no-validation-split"),
    # every number finite: inf/nan anywhere, as a word or as YAML's .inf/.nan, nested sections and dict values too
    pytest.param(["optim.lr=inf"], "optim.lr", "'inf'", "finite number", id="inf-lr"),
    pytest.param(["optim.lr=.nan"], "optim.lr", "nan", "finite number", id="nan-lr"),
    pytest.param(["rollout.temperature=-.inf"], "rollout.temperature", "-inf", "finite number", id="minus-inf"),
    pytest.param(["train.max_minutes=.inf"], "train.max_minutes", "inf", "finite number", id="inf-optional"),
    pytest.param(["policies={p: {optim: {lr: .inf}}}"], "policies.p.optim.lr", "inf", "finite number",
                 id="inf-nested-policy-lr"),
    pytest.param(["algo.kl_coef_by_role={generator: .nan}"], "algo.kl_coef_by_role.generator", "nan",
                 "finite number", id="nan-dict-value"),
    pytest.param(["algo.estimator_options={eps: .inf}"], "algo.estimator_options.eps", "inf", "finite number",
                 id="inf-estimator-option"),
    pytest.param(["metapolicy={lr: .nan}"], "metapolicy.lr", "nan", "finite number", id="nan-metapolicy"),
    pytest.param(["workflow.options={format_penalty: .nan}"], "workflow.options.format_penalty", "nan",
                 "finite number", id="nan-workflow-option"),
    pytest.param(["workflow.name=search_answer", "workflow.options={alpha: .inf}"], "workflow.options.alpha", "inf",
                 "finite number", id="inf-workflow-option"),
]


@pytest.mark.parametrize("overrides, path, value, allowed", BAD)
def test_bad_config_names_path_value_and_allowed_before_any_model(overrides, path, value, allowed):
    t0 = time.monotonic()
    with pytest.raises(ConfigError) as e:
        load_config(None, overrides)
    msg = str(e.value)
    line = next((x for x in msg.splitlines() if f"{path}:" in x), None)
    assert line is not None, msg
    assert value in line and allowed in line, msg
    assert time.monotonic() - t0 < 2.0


def test_the_same_errors_come_from_a_yaml_file(tmp_path):
    f = tmp_path / "run.yaml"
    f.write_text("rollout:\n  group_size: 1\n")
    with pytest.raises(ConfigError, match=r"rollout\.group_size: 1 gives every turn advantage 0"):
        load_config(f)


def test_validation_never_relies_on_assert():
    """`python -O` strips asserts, so no source file may use one (for validation or otherwise)."""
    found = [f"{p.relative_to(SRC)}:{node.lineno}" for p in sorted(SRC.rglob("*.py"))
             for node in ast.walk(ast.parse(p.read_text("utf-8"))) if isinstance(node, ast.Assert)]
    assert not found, found


@pytest.mark.parametrize("text, line, key", [
    ("train:\n  steps: 2\nrollout:\n  group_size: 4\ntrain:\n  steps: 3\n", 5, "train"),
    ("train:\n  steps: 2\n  steps: 3\n", 3, "steps"),
    ("routing: {generator: g, generator: h}\n", 1, "generator"),
])
def test_a_key_given_twice_is_refused_naming_file_line_and_key(tmp_path, text, line, key):
    f = tmp_path / "run.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_config(f)
    msg = str(e.value)
    assert len(msg.splitlines()) == 1 and "run.yaml" in msg, msg
    assert f"line {line}: duplicate key {key!r}" in msg, msg


def test_a_merge_may_override_a_key_and_a_prompt_file_may_not_repeat_one(tmp_path):
    from rolecall.yamldata import safe_load_unique

    assert safe_load_unique("a: &d {x: 1, y: 2}\nb: {<<: *d, y: 3}\n")["b"] == {"x": 1, "y": 3}
    prompts = tmp_path / "prompts.yaml"
    prompts.write_text("generator: 'Solve $problem'\naggregator: 'Pick: $candidates'\ngenerator: 'x $problem'\n")
    with pytest.raises(ConfigError, match=r"workflow\.prompts: cannot read prompt file .*duplicate key 'generator'"):
        load_config(None, [f"workflow.prompts={prompts}"])


# --- nothing a user passes is executed as code --------------------------------------------

PYTHON_TAG = '!!python/object/apply:os.system ["touch {marker}"]'


def test_a_python_tag_in_a_config_file_is_refused_not_run(tmp_path):
    marker = tmp_path / "pwned"
    f = tmp_path / "run.yaml"
    f.write_text("train:\n  steps: " + PYTHON_TAG.format(marker=marker) + "\n")
    with pytest.raises(ConfigError, match=r"config file .*run\.yaml.*not valid YAML data.*python/object/apply:os\.system"):
        load_config(f)
    assert not marker.exists()


def test_a_python_tag_in_an_override_is_refused_not_run(tmp_path):
    marker = tmp_path / "pwned"
    with pytest.raises(ConfigError, match=r"override 'train\.steps=.*not valid YAML data.*line 1, column 1"):
        load_config(None, ["train.steps=" + PYTHON_TAG.format(marker=marker)])
    assert not marker.exists()


def test_a_python_tag_in_a_prompt_file_is_refused_not_run(tmp_path):
    marker = tmp_path / "pwned"
    prompts = tmp_path / "prompts.yaml"
    prompts.write_text("generator: " + PYTHON_TAG.format(marker=marker) + "\n")
    with pytest.raises(ConfigError, match=r"workflow\.prompts: cannot read prompt file .*python/object/apply"):
        load_config(None, [f"workflow.prompts={prompts}"])
    assert not marker.exists()


def test_code_like_dataset_rows_are_data_not_code(tmp_path):
    """Prompts and gold answers that look like Python are loaded and graded as plain text."""
    from rolecall.rewards.verifier import MathVerifier, QAVerifier
    from rolecall.tasks.dataset import load_dataset_problems

    marker = tmp_path / "pwned"
    payloads = [f"__import__('os').system('touch {marker}')", f"eval(\"open('{marker}', 'w')\")",
                f"{{{{ self.__init__.__globals__.os.system('touch {marker}') }}}}", "1+1"]
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"prompt": p, "solution": p}) + "\n" for p in payloads))
    cfg = load_config(None, ["task.name=dataset", f"data.path={rows}", "data.test_fraction=0.5"])
    train_P, val_P = load_dataset_problems(cfg.data, log=lambda line: None)
    problems = train_P + val_P
    assert sorted(p.answer for p in problems) == sorted(payloads)
    echoes = ["\\boxed{" + p.answer + "}" for p in problems]
    strict = MathVerifier(checker="strict").score_many(echoes, problems)
    assert [s.value for s in strict] == [1.0] * len(problems)  # compared as text, equal to itself
    judged = MathVerifier(checker="math_verify", deadline_s=20.0)
    try:  # a different answer sends every gold through math-verify's LaTeX/sympy parsing
        verdicts = judged.score_many(["\\boxed{2}"] * len(problems), problems)
    finally:
        judged.close()
    assert {s.status for s in verdicts} <= {"ok", "wrong"}
    QAVerifier().score_many(echoes, problems)
    assert not marker.exists()
