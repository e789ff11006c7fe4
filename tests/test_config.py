"""Config loading: YAML + dotted overrides, strict validation with messages that name the path."""
from __future__ import annotations

import re

import pytest

from rolecall.config import Config, ConfigError, dump_config, load_config


def test_defaults_validate():
    cfg = load_config(None, [])
    assert isinstance(cfg, Config)
    assert cfg.workflow.name == "voting" and cfg.routing == "isolated" and cfg.algo.estimator == "grpo"


def test_overrides_parse_yaml_scalars_and_maps():
    cfg = load_config(None, ["rollout.group_size=3", "rollout.temperature=0.5", "workflow.name=eval_opt",
                             "workflow.options={rounds: 2}", "routing={generator: g, evaluator: base}",
                             "policies={g: {trainable: false}}"])
    assert cfg.rollout.group_size == 3 and cfg.rollout.temperature == 0.5
    assert cfg.workflow.options == {"rounds": 2}
    assert cfg.routing == {"generator": "g", "evaluator": "base"}
    assert cfg.policy_table() == {"g": False}


def test_unknown_nested_key_names_path_and_allowed_keys():
    with pytest.raises(ConfigError, match=r"rollout\.group_sizes: unknown key") as e:
        load_config(None, ["rollout.group_sizes=3"])
    assert "'group_size'" in str(e.value) and "'temperature'" in str(e.value)


def test_unknown_top_level_key_lists_sections():
    with pytest.raises(ConfigError, match=r"rollouts: unknown key; allowed here: \[.*'rollout'"):
        load_config(None, ["rollouts.group_size=3"])


@pytest.mark.parametrize("override,path", [
    ("rollout.group_size=abc", "rollout.group_size"),
    ("rollout.temperature=hot", "rollout.temperature"),
    ("model.dtype=float64", "model.dtype"),
    ("train.steps=[1, 2]", "train.steps"),
    ("algo.loss_agg=sum", "algo.loss_agg"),
])
def test_wrong_types_name_the_path(override, path):
    with pytest.raises(ConfigError, match=path.replace(".", r"\.")):
        load_config(None, [override])


@pytest.mark.parametrize("override", ["rollout.group_size=0", "rollout.problems_per_step=-1",
                                      "rollout.max_new_tokens=0", "train.steps=0",
                                      "rollout.temperature=0", "algo.micro_batch_tokens=0",
                                      "rollout.max_new_tokens_by_role={generator: 0}"])
def test_non_positive_sizes_are_rejected(override):
    with pytest.raises(ConfigError, match=override.split("=")[0].replace(".", r"\.")):
        load_config(None, [override])


def test_unknown_workflow():
    with pytest.raises(ConfigError, match=r"workflow\.name: unknown workflow 'nope'.*voting"):
        load_config(None, ["workflow.name=nope"])


def test_unknown_workflow_option():
    with pytest.raises(ConfigError, match=r"workflow\.options: unknown option.*\['n_voters', 'fallback', 'aggregator', 'role_format', 'format_penalty'\]"):
        load_config(None, ["workflow.options={rounds: 2}"])


def test_bad_workflow_option_value_is_a_config_error():
    """A non-integer count is reported like any other config error, not as a TypeError."""
    with pytest.raises(ConfigError, match=r"workflow\.options\.n_voters"):
        load_config(None, ["workflow.options.n_voters=three"])


def test_unknown_estimator_lists_allowed():
    from rolecall.advantages import ESTIMATORS

    with pytest.raises(ConfigError, match=re.escape(f"algo.estimator: unknown 'ppo'; allowed: {sorted(ESTIMATORS)}")):
        load_config(None, ["algo.estimator=ppo"])


def test_estimator_options_are_checked_at_load():
    assert load_config(None, ["algo.estimator=softrank", "algo.estimator_options={tau: 0.8}"]).algo.estimator_options == {"tau": 0.8}
    with pytest.raises(ConfigError, match=r"unknown option\(s\) \['tau'\] for 'grpo'; allowed: \['eps'\]"):
        load_config(None, ["algo.estimator_options={tau: 0.8}"])
    with pytest.raises(ConfigError, match="tau: must be > 0"):
        load_config(None, ["algo.estimator=softrank", "algo.estimator_options={tau: -1}"])
    with pytest.raises(ConfigError, match="estimator_options"):
        load_config(None, ["algo.estimator=softrank", "algo.estimator_options={tau: high}"])


def test_role_routed_to_missing_policy():
    with pytest.raises(ConfigError, match=r"routing: .*aggregator -> a") as e:
        load_config(None, ["routing={generator: g, aggregator: a}", "policies={g: {}}"])
    assert "['g']" in str(e.value)


def test_routing_missing_role():
    with pytest.raises(ConfigError, match=r"routing: role\(s\) \['aggregator'\]"):
        load_config(None, ["routing={generator: g}"])


def test_token_budget_for_a_role_the_workflow_lacks():
    with pytest.raises(ConfigError, match=r"max_new_tokens_by_role: \['judge'\]"):
        load_config(None, ["rollout.max_new_tokens_by_role={judge: 8}"])


def test_yaml_file_and_override_precedence(tmp_path):
    f = tmp_path / "run.yaml"
    f.write_text("workflow:\n  name: orch_workers\nrollout:\n  group_size: 4\n  temperature: 0.9\n")
    cfg = load_config(f, ["rollout.group_size=2"])
    assert cfg.rollout.group_size == 2  # override wins
    assert cfg.rollout.temperature == 0.9  # file value kept
    assert cfg.workflow.name == "orch_workers"
    assert cfg.rollout.max_new_tokens == 48  # default for what neither sets


def test_yaml_file_errors_name_the_path(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("algo:\n  estimater: grpo\n")
    with pytest.raises(ConfigError, match=r"algo\.estimater: unknown key"):
        load_config(f)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")


def test_non_mapping_file(tmp_path):
    f = tmp_path / "list.yaml"
    f.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping at the top level"):
        load_config(f)


@pytest.mark.parametrize("override,msg", [("noequals", "expected dotted.key=value"),
                                          ("=3", "expected dotted.key=value")])
def test_malformed_override(override, msg):
    with pytest.raises(ConfigError, match=msg):
        load_config(None, [override])


def test_override_into_a_scalar_is_not_a_section():
    with pytest.raises(ConfigError, match="'rollout' is not a section"):
        load_config(None, ["rollout=3", "rollout.group_size=2"])


def test_dump_round_trips(tmp_path):
    cfg = load_config(None, ["workflow.name=eval_opt", "workflow.options={rounds: 2}", "routing=shared",
                             "policies={shared: {trainable: true}}", "rollout.max_new_tokens_by_role={evaluator: 8}",
                             "algo.dual_clip=null", "algo.group_by=role", "lora.target_modules=[q_proj, v_proj]"])
    f = tmp_path / "config.yaml"
    f.write_text(dump_config(cfg))
    again = load_config(f)
    assert again == cfg
    assert again.algo.dual_clip is None and again.lora.target_modules == ["q_proj", "v_proj"]
    assert dump_config(again) == dump_config(cfg)


def test_config_is_validated_on_assignment():
    cfg = load_config(None, [])
    with pytest.raises(ValueError):
        cfg.rollout.group_size = 0


def test_ray_actors_with_the_vllm_engine_are_refused():
    # The actors generate with the HF engine: a vLLM engine in the trainer would be built and never used.
    with pytest.raises(ConfigError, match=r"rollout\.engine=vllm with rollout\.actors"):
        load_config(None, ["rollout.actors=2", "rollout.engine=vllm"])


def _judge_flow_module(tmp_path, monkeypatch):
    (tmp_path / "rc_user_judge.py").write_text(
        "from rolecall.workflows import Workflow, user\n"
        "class Judge(Workflow):\n"
        "    name = 'judge'\n"
        "    roles = ('solver', 'judge')\n"
        "    def __init__(self, prompts=None, strict=False):\n"
        "        super().__init__(prompts or {})\n"
        "        self.strict = strict\n"
        "    async def run(self, problem, team):\n"
        "        return await team.call('solver', [user(problem.prompt)])\n")
    monkeypatch.syspath_prepend(str(tmp_path))


def test_swapping_the_workflow_of_a_shipped_config_drops_the_options_written_for_the_old_one(tmp_path, monkeypatch):
    """The real voting config's options (n_voters, role_format, format_penalty) and prompt set
    were written for voting: a user workflow swapped in by an override does not receive them
    (they would fail its constructor as unknown), and the run says so."""
    _judge_flow_module(tmp_path, monkeypatch)
    shipped = "configs/real/smollm2-voting-ip.yaml"
    with pytest.warns(UserWarning, match=r"workflow.options=.*n_voters.*not passed on"):
        cfg = load_config(shipped, ["workflow.name=rc_user_judge:Judge", "routing=shared"])
    assert cfg.workflow.name == "rc_user_judge:Judge" and cfg.workflow.options == {} and cfg.workflow.prompts is None
    # options given with the swap are the user's own, and kept
    cfg = load_config(shipped, ["workflow.name=rc_user_judge:Judge", "workflow.options={strict: true}",
                                "routing=shared"])
    assert cfg.workflow.options == {"strict": True}
    # the same workflow named again changes nothing
    assert load_config(shipped, ["workflow.name=voting"]).workflow.options["n_voters"] == 3
    # between shipped workflows the prompt set stays (the grid swaps single for voting on the real config)
    swapped = load_config("configs/real/smollm2-single.yaml", ["workflow.name=voting", "workflow.options={n_voters: 3}"])
    assert swapped.workflow.prompts == "small" and swapped.workflow.options == {"n_voters": 3}
