"""Shipped and user workflows run against a ScriptedEngine: turn structure, slots, fallbacks."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rolecall.testing import ScriptedEngine
from rolecall.rollout import rollout
from rolecall.types import Problem
from rolecall.workflows import (WORKFLOWS, Workflow, WorkflowError, build_workflow, load_prompts,
                                resolve_workflow_class)
from rolecall.workflows.orch_workers import parse_strategies
from rolecall.workflows.voting import majority_choice, parse_choice
from workflow_helpers import MATH_WORKFLOWS, OWN_PROMPTS, PROBLEM, QA_WORKFLOWS, by_role, isolated, roles, run, slots

REPO = Path(__file__).resolve().parents[1]
# --------------------------------------------------------------------------- registry


def test_shipped_workflow_names_and_roles():
    """The paper's four workflows with the roles the paper gives them, and the others shipped
    (a workflow added as a file joins the registry freely)."""
    shipped = {
        "single": ("generator",),
        "eval_opt": ("generator", "evaluator"),
        "voting": ("generator", "aggregator"),
        "orch_workers": ("orchestrator", "worker", "synthesizer"),
        "chain": ("generator", "verifier", "refiner"),
        "debate": ("debater",),
        "search_answer": ("searcher", "generator"),
        "deliberation": ("agent",),
    }
    assert {n: WORKFLOWS[n].roles for n in shipped} == shipped


def test_math_prompts_cover_every_template_the_workflows_render():
    """Every template a shipped workflow renders exists in the shipped math set."""
    prompts = load_prompts("math")
    assert {"generator", "revise", "evaluator", "aggregator", "orchestrator", "worker",
            "synthesizer", "default_strategy"} <= set(prompts)


def test_unknown_prompt_set_is_a_value_error():
    with pytest.raises(ValueError, match="workflow.prompts.*nope"):
        load_prompts("nope")


def test_unknown_workflow_lists_allowed_names():
    with pytest.raises(ValueError, match="unknown workflow 'nope'") as e:
        resolve_workflow_class("nope")
    assert "voting" in str(e.value) and "module:Class" in str(e.value)


def test_unknown_option_names_the_allowed_options():
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['voters'\].*allowed: \['n_voters', 'fallback', 'aggregator', 'role_format', 'format_penalty'\]"):
        build_workflow("voting", load_prompts(), {"voters": 3})


@pytest.mark.parametrize("name,option", [("voting", "n_voters"), ("eval_opt", "rounds"),
                                         ("orch_workers", "n_workers")])
@pytest.mark.parametrize("bad", [0, -1, 2.5, "3", True])
def test_count_options_must_be_positive_ints(name, option, bad):
    """n_voters=0 (and non-integers) fail with a ValueError naming the option."""
    with pytest.raises(ValueError, match=f"workflow.options.{option}"):
        build_workflow(name, load_prompts(), {option: bad})


def test_missing_template_names_it():
    """A prompt set lacking a template fails when the workflow is built, naming the template."""
    with pytest.raises(ValueError, match="no template 'generator', which workflow 'single' needs.*other"):
        build_workflow("single", {"other": "x"}, {})


@pytest.mark.parametrize("name", [n for n in MATH_WORKFLOWS if n not in OWN_PROMPTS])
@pytest.mark.parametrize("prompts", ["math", "code", "paper_math", "paper_code"])
def test_every_shipped_prompt_set_fits_every_shipped_workflow(name, prompts):
    build_workflow(name, load_prompts(prompts), {})


def test_deliberation_defaults_to_its_own_prompt_set():
    from rolecall.workflows import workflow_prompts

    assert workflow_prompts("deliberation", None) == load_prompts("deliberation")
    with pytest.raises(ValueError, match="no template 'solve'"):
        build_workflow("deliberation", load_prompts("math"), {})


@pytest.mark.parametrize("name", QA_WORKFLOWS)
def test_question_answering_workflows_default_to_their_own_prompt_set(name):
    from rolecall.workflows import workflow_prompts

    assert workflow_prompts(name, None) == load_prompts("search")
    build_workflow(name, load_prompts("search"), {})
    with pytest.raises(ValueError, match="no template 'searcher'"):
        build_workflow(name, load_prompts("math"), {})


@pytest.mark.parametrize("template, message", [
    ("Solve $problem, then $answr", r"uses \$answr, which workflow 'eval_opt' does not provide; it provides \$problem"),
    ("Pay $5 for $problem", "'\\$' that starts no placeholder; write \\$\\$"),
])
def test_a_bad_placeholder_fails_at_build_time_naming_it(template, message):
    prompts = {**load_prompts("math"), "generator": template}
    with pytest.raises(ValueError, match=message):
        build_workflow("eval_opt", prompts, {})


def test_a_user_workflow_without_declared_templates_names_a_missing_one_at_render():
    class Loose(Workflow):
        name, roles = "loose", ("generator",)

    with pytest.raises(KeyError, match="no prompt template 'generator'.*other"):
        Loose({"other": "x"}).render("generator", problem="1+1")


# --------------------------------------------------------------------------- single


def test_single_is_one_generator_turn():
    eps, engine = run("single", lambda r: "so \\boxed{42}")
    (ep,) = eps
    assert roles(ep) == slots(ep) == ["generator"]
    assert ep.turns[0].policy == "generator"
    assert ep.final_answer == "so \\boxed{42}"
    assert "12+30" in engine.batches[0][0].messages[-1]["content"]


# --------------------------------------------------------------------------- voting


def test_voting_slots_roles_and_aggregator_prompt():
    """Three generator slots then the aggregator, which sees the numbered candidates."""
    eps, engine = run("voting", by_role(generator=["A \\boxed{1}", "B \\boxed{2}", "C \\boxed{3}"],
                                        aggregator="\\boxed{2}"))
    (ep,) = eps
    assert slots(ep) == ["generator0", "generator1", "generator2", "aggregator"]
    assert roles(ep) == ["generator"] * 3 + ["aggregator"]
    assert [t.completion_text for t in ep.turns[:3]] == ["A \\boxed{1}", "B \\boxed{2}", "C \\boxed{3}"]
    gen_prompts = [r.messages for r in engine.batches[0]]
    assert gen_prompts[0] == gen_prompts[1] == gen_prompts[2]  # independent, same prompt
    agg = engine.batches[1][0].messages[-1]["content"]
    assert "1: A \\boxed{1}\n2: B \\boxed{2}\n3: C \\boxed{3}" in agg and "12+30" in agg


def test_voting_returns_the_aggregators_pick():
    eps, _ = run("voting", by_role(generator=["A \\boxed{1}", "B \\boxed{2}", "C \\boxed{3}"],
                                   aggregator="I pick \\boxed{3}"))
    (ep,) = eps
    assert ep.final_answer == "C \\boxed{3}"
    assert ep.info["aggregator_fallback"] is False
    assert ep.info["selected"] == 3


@pytest.mark.parametrize("pick", ["no box", "\\boxed{4}", "\\boxed{0}", "\\boxed{two}",
                                  "\\boxed{²}", "\\boxed{1.0}"])
def test_voting_unusable_pick_falls_back_to_majority(pick):
    """Unparseable or out-of-range picks use the majority box (here candidate 2, box 5)."""
    eps, _ = run("voting", by_role(generator=["\\boxed{3}", "x \\boxed{5}", "y \\boxed{5}"], aggregator=pick),
                 options={"fallback": "majority"})
    (ep,) = eps
    assert ep.info["aggregator_fallback"] is True
    assert ep.info["selected"] == 2
    assert ep.final_answer == "x \\boxed{5}"


@pytest.mark.parametrize("pick", ["no box", "\\boxed{4}"])
def test_voting_default_fallback_is_the_first_candidate(pick):
    """The default fallback gives an unparseable aggregator no edge over a real pick."""
    eps, _ = run("voting", by_role(generator=["\\boxed{3}", "x \\boxed{5}", "y \\boxed{5}"], aggregator=pick))
    assert eps[0].info["aggregator_fallback"] is True
    assert eps[0].info["selected"] == 1 and eps[0].final_answer == "\\boxed{3}"


def test_voting_rejects_an_unknown_fallback():
    with pytest.raises(ValueError, match="fallback"):
        build_workflow("voting", load_prompts("math"), {"fallback": "random"})


def test_voting_majority_tie_goes_to_lowest_index():
    eps, _ = run("voting", by_role(generator=["no box", "\\boxed{7}", "\\boxed{9}"], aggregator="??"),
                 options={"fallback": "majority"})
    assert eps[0].final_answer == "\\boxed{7}"
    assert eps[0].info["selected"] == 2


@pytest.mark.parametrize("candidates,expected", [
    (["\\boxed{1}", "\\boxed{2}", "\\boxed{2}"], 2),
    (["\\boxed{1}", "\\boxed{2}", "\\boxed{3}"], 1),  # three-way tie: lowest index
    (["none", "none", "\\boxed{8}"], 3),  # unboxed candidates never win against a box
    (["none", "none", "none"], 1),  # nothing boxed: candidate 1
])
def test_majority_choice(candidates, expected):
    assert majority_choice(candidates) == expected


def test_parse_choice():
    assert parse_choice("\\boxed{ 2 }", 3) == 2
    assert parse_choice("\\boxed{1} then \\boxed{3}", 3) == 3  # the last box counts
    assert parse_choice("\\boxed{3}", 2) is None
    assert parse_choice("\\boxed{-1}", 3) is None


def test_voting_n_voters_option_sets_slot_count():
    eps, engine = run("voting", by_role(generator="\\boxed{1}", aggregator="\\boxed{1}"),
                      options={"n_voters": 2})
    assert slots(eps[0]) == ["generator0", "generator1", "aggregator"]
    assert "Pick the best of 2 candidates" in engine.batches[1][0].messages[-1]["content"]


# --------------------------------------------------------------------------- eval_opt


def test_eval_opt_stops_on_correct():
    eps, _ = run("eval_opt", by_role(generator="\\boxed{42}", evaluator="fine \\boxed{Correct}"))
    (ep,) = eps
    assert slots(ep) == roles(ep) == ["generator", "evaluator"]
    assert ep.final_answer == "\\boxed{42}"
    assert ep.info["verdicts"] == [True]


def test_eval_opt_at_most_rounds_generator_and_evaluator_calls():
    """Always Incorrect with rounds=3 (math): three generator and three evaluator calls, as the
    paper's code runs it; the last verdict changes nothing but its turn is trained."""
    eps, _ = run("eval_opt", by_role(generator=["\\boxed{1}", "\\boxed{2}", "\\boxed{3}"],
                                     evaluator="\\boxed{Incorrect} wrong sum"))
    (ep,) = eps
    assert slots(ep) == ["generator", "evaluator"] * 3
    assert ep.final_answer == "\\boxed{3}"  # the last generator output
    assert ep.info["verdicts"] == [False, False, False]
    assert ep.graded == {"judged": ["\\boxed{1}", "\\boxed{2}", "\\boxed{3}"]}


@pytest.mark.parametrize("rounds,expected", [(1, ["generator", "evaluator"]),
                                             (2, ["generator", "evaluator"] * 2)])  # code: 2 + 2
def test_eval_opt_rounds_option(rounds, expected):
    eps, _ = run("eval_opt", by_role(generator="\\boxed{1}", evaluator="\\boxed{Incorrect}"),
                 options={"rounds": rounds})
    assert slots(eps[0]) == expected


@pytest.mark.parametrize("task,rounds", [("math", 3), ("code", 2)])
def test_eval_opt_call_counts_match_the_paper_presets(task, rounds):
    """The paper presets' rounds give 3 + 3 calls on math and 2 + 2 on code."""
    from rolecall.config import load_config

    cfg = load_config(REPO / "configs" / "paper" / f"{task}-eval_opt-ip.yaml",
                      [f"data.path={REPO / 'README.md'}"])
    assert cfg.workflow.options["rounds"] == rounds
    eps, _ = run("eval_opt", by_role(generator="\\boxed{1}", evaluator="\\boxed{Incorrect}"),
                 options=cfg.workflow.options)
    assert roles(eps[0]).count("generator") == roles(eps[0]).count("evaluator") == rounds


def test_eval_opt_unparseable_verdict_revises():
    eps, _ = run("eval_opt", by_role(generator=["\\boxed{1}", "\\boxed{2}"],
                                     evaluator=["looks odd", "\\boxed{Correct}"]))
    (ep,) = eps
    assert slots(ep) == ["generator", "evaluator", "generator", "evaluator"]
    assert ep.info["verdicts"] == [None, True]
    assert ep.final_answer == "\\boxed{2}"


@pytest.mark.parametrize("text,verdict", [
    ("\\boxed{Incorrect} then later \\boxed{Correct}", False),   # the first verdict box counts
    ("the answer is \\boxed{42}. \\boxed{Correct}", True),         # a leaked answer box is no verdict
    ("\\boxed{ correct }", True),
    ("<think>\\boxed{Incorrect}</think> \\boxed{Correct}", True),   # reasoning is not the reply
    ("\\boxed{Maybe}", None),
    ("Correct", None),
])
def test_eval_opt_verdict_is_the_first_verdict_box(text, verdict):
    from rolecall.parsing import first_verdict

    assert first_verdict(text) is verdict


def test_eval_opt_revision_and_evaluator_see_the_conversation():
    """The reviser gets its first answer as an assistant turn and the critique after it; the
    evaluator sees the problem, every solution so far and its own earlier critiques."""
    eps, engine = run("eval_opt", by_role(generator=["first \\boxed{1}", "second \\boxed{42}"],
                                          evaluator=["\\boxed{Incorrect} carry the ten", "\\boxed{Correct}"]))
    evaluator_req = engine.batches[1][0]
    assert "first \\boxed{1}" in evaluator_req.messages[-1]["content"]
    revise = engine.batches[2][0].messages
    assert [m["role"] for m in revise] == ["user", "assistant", "user"]
    assert "12+30" in revise[0]["content"]
    assert revise[1]["content"] == "first \\boxed{1}"
    assert "carry the ten" in revise[2]["content"]
    review = engine.batches[3][0].messages
    assert [m["role"] for m in review] == ["user", "assistant", "user"]
    assert "12+30" in review[0]["content"] and "first \\boxed{1}" in review[0]["content"]
    assert review[1]["content"] == "\\boxed{Incorrect} carry the ten"
    assert "second \\boxed{42}" in review[2]["content"] and "first" not in review[2]["content"]


def _scored_eval_opt(options, evaluator):
    """One eval_opt episode scored by the exact math verifier (gold 42), then credited."""
    from rolecall.rewards.verifier import build_verifier
    from rolecall.config import RewardCfg
    from rolecall.algo.credit import credit
    from rolecall.algo.scoring import score
    wf = build_workflow("eval_opt", load_prompts("math"), options)
    engine = ScriptedEngine(by_role(generator=["\\boxed{1}", "\\boxed{42}", "\\boxed{42}"], evaluator=evaluator))
    eps = rollout(wf, [PROBLEM], 1, engine, isolated(wf), lambda role: 32, 0.7)
    verifier = build_verifier(RewardCfg(math_checker="strict"))
    try:
        score(eps, verifier)
    finally:
        verifier.close()
    return eps[0], credit(eps, wf)


def test_eval_opt_evaluator_accuracy_and_optional_evaluator_reward():
    # Judged: \\boxed{1} (wrong) called Incorrect -> right; \\boxed{42} (right) called "??" -> wrong;
    # \\boxed{42} (right) called Correct -> right.
    verdicts = ["\\boxed{Incorrect}", "??", "\\boxed{Correct}"]
    ep, metrics = _scored_eval_opt({}, verdicts)
    assert ep.graded_rewards == {"judged": [0.0, 1.0, 1.0]}
    assert metrics["eval_opt/evaluator_accuracy"] == pytest.approx(2 / 3)
    assert metrics["eval_opt/iter1_verdict_incorrect"] == 1.0
    assert not ep.turn_rewards  # off by default: the outcome is broadcast
    ep, _ = _scored_eval_opt({"evaluator_reward": True}, verdicts)
    evaluators = [t.index for t in ep.turns if t.role == "evaluator"]
    assert ep.turn_rewards == dict(zip(evaluators, [1.0, 0.0, 1.0]))
    from rolecall.algo.credit import advantages
    turns, adv, _ = advantages([ep], "grpo", "slot")  # one episode: every advantage 0, but no error
    assert len(turns) == 6


# --------------------------------------------------------------------------- orch_workers


def test_orch_workers_structure_and_strategies_reach_workers():
    plan = "Here are three strategies:\n1. add the tens first\n2) count up from 30\nStrategy 3: split 12 into 10+2"
    eps, engine = run("orch_workers", by_role(orchestrator=plan, worker=["w1", "w2", "w3"],
                                              synthesizer="\\boxed{42}"))
    (ep,) = eps
    assert roles(ep) == slots(ep) == ["orchestrator", "worker", "worker", "worker", "synthesizer"]
    worker_prompts = [r.messages[-1]["content"] for r in engine.batches[1]]
    for prompt, strategy in zip(worker_prompts, ["add the tens first", "count up from 30", "split 12 into 10+2"]):
        assert f"strategy: {strategy}\n" in prompt and "12+30" in prompt
    assert ep.info["strategies_missing"] == 0
    synth = engine.batches[2][0].messages[-1]["content"]
    assert "1: w1\n2: w2\n3: w3" in synth
    assert ep.final_answer == "\\boxed{42}"


def test_orch_workers_fills_missing_strategies_with_default():
    eps, engine = run("orch_workers", by_role(orchestrator="1. guess and check", worker="w",
                                              synthesizer="s"))
    worker_prompts = [r.messages[-1]["content"] for r in engine.batches[1]]
    assert "guess and check" in worker_prompts[0]
    default = load_prompts()["default_strategy"]
    assert all(default in p for p in worker_prompts[1:]) and default not in worker_prompts[0]
    assert eps[0].info["strategies_missing"] == 2


def test_parse_strategies():
    assert parse_strategies("1. a\n2. a\n3. b\n4. c", 3) == ["a", "b", "c"]  # distinct, capped
    assert parse_strategies("plain one\n\nplain two", 3) == ["plain one", "plain two"]  # no numbering
    assert parse_strategies("Strategies:\n- x\n* y", 3) == ["x", "y"]  # preamble skipped
    assert parse_strategies("1) 3.5 times\n2: 7 ways", 3) == ["3.5 times", "7 ways"]
    assert parse_strategies("", 3) == []


# --------------------------------------------------------------------------- routing, ordering


def test_turn_policy_follows_routes():
    eps, engine = run("voting", by_role(g="\\boxed{1}", a="\\boxed{1}"),
                      routes={"generator": "g", "aggregator": "a"})
    assert [t.policy for t in eps[0].turns] == ["g", "g", "g", "a"]
    assert [r.policy for b in engine.batches for r in b] == ["g", "g", "g", "a"]


def test_shared_route_sends_every_role_to_one_policy():
    eps, _ = run("orch_workers", lambda r: "1. x", routes={r: "shared" for r in WORKFLOWS["orch_workers"].roles})
    assert {t.policy for t in eps[0].turns} == {"shared"}
    assert len({t.role for t in eps[0].turns}) == 3


def test_role_missing_from_routes_raises():
    with pytest.raises(WorkflowError, match="workflow 'voting' failed.*KeyError.*'aggregator' has no route.*voting.py"):
        run("voting", lambda r: "\\boxed{1}", routes={"generator": "g"})


def test_episodes_are_problem_major_with_sample_indices():
    problems = [Problem(uid=f"p{i}", prompt=f"{i}+1", answer=str(i + 1)) for i in range(3)]
    eps, _ = run("single", lambda r: r.messages[-1]["content"].split("\n")[-1], problems=problems, group_size=4)
    assert [(e.problem.uid, e.sample) for e in eps] == [(f"p{i}", g) for i in range(3) for g in range(4)]
    assert all(e.final_answer == e.problem.prompt for e in eps)  # each episode got its own reply


# --------------------------------------------------------------------------- user workflow


@pytest.fixture
def repo_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO))
    yield
    for mod in [m for m in sys.modules if m == "examples" or m.startswith("examples.")]:
        del sys.modules[mod]


def test_user_workflow_resolves_and_runs(repo_on_path):
    """examples/my_workflow.py: importable by 'module:Class', runs through rollout with its YAML prompts."""
    cls = resolve_workflow_class("examples.my_workflow:ProposeCheck")
    assert issubclass(cls, Workflow) and cls.roles == ("proposer", "checker")
    prompts = load_prompts(str(REPO / "examples" / "my_workflow_prompts.yaml"))
    wf = build_workflow("examples.my_workflow:ProposeCheck", prompts, {"retries": 1})
    engine = ScriptedEngine(by_role(p="\\boxed{41}", c="\\boxed{WRONG} off by one"))
    eps = rollout(wf, [PROBLEM], 2, engine, {"proposer": "p", "checker": "c"}, lambda r: 16, 1.0)
    assert [len(b) for b in engine.batches] == [2, 2, 2]  # both samples share every wave
    ep = eps[0]
    assert [(t.role, t.policy) for t in ep.turns] == [("proposer", "p"), ("checker", "c"), ("proposer", "p")]
    assert ep.info["checked_ok"] is False
    assert "off by one" in engine.batches[2][0].messages[-1]["content"]


def test_user_workflow_yaml_matches_its_python_prompts(repo_on_path):
    from examples.my_workflow import PROMPTS
    assert load_prompts(str(REPO / "examples" / "my_workflow_prompts.yaml")) == PROMPTS


def test_user_workflow_through_config(repo_on_path):
    from rolecall.config import load_config
    cfg = load_config(None, ["workflow.name=examples.my_workflow:ProposeCheck",
                             f"workflow.prompts={REPO / 'examples' / 'my_workflow_prompts.yaml'}",
                             "routing={proposer: a, checker: base}"])
    assert cfg.workflow.name == "examples.my_workflow:ProposeCheck"


def test_a_user_workflow_without_workflow_prompts_uses_its_own_defaults(repo_on_path):
    """Without `workflow.prompts` the workflow's own `prompts=` default is used, not the shipped
    math set (which lacks its templates); a shipped workflow still gets the math set."""
    from examples.my_workflow import PROMPTS
    from rolecall.config import load_config
    from rolecall.workflows import workflow_prompts

    cfg = load_config(None, ["workflow.name=examples.my_workflow:ProposeCheck", "routing={proposer: a, checker: base}"])
    assert cfg.workflow.prompts is None
    assert workflow_prompts(cfg.workflow.name, None) == PROMPTS
    assert workflow_prompts("voting", None) == load_prompts("math")
    assert workflow_prompts("examples.my_workflow:ProposeCheck", "math") == load_prompts("math")


@pytest.mark.parametrize("name,msg", [
    ("examples.my_workflow:PROMPTS", "not a rolecall Workflow subclass"),
    ("rolecall.types:Problem", "not a rolecall Workflow subclass"),
    ("examples.my_workflow:Nope", "cannot import"),
    ("examples.no_such_module:X", "cannot import"),
])
def test_user_workflow_bad_reference(repo_on_path, name, msg):
    with pytest.raises(ValueError, match=f"workflow.name.*{msg}"):
        resolve_workflow_class(name)


def test_user_workflow_found_in_working_directory(tmp_path, monkeypatch):
    """A console script lacks the cwd on sys.path; a module next to the user is still found."""
    (tmp_path / "rc_cwd_wf.py").write_text(
        "from rolecall.workflows import Workflow\n"
        "class W(Workflow):\n    name = 'w'\n    roles = ('generator',)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    try:
        assert resolve_workflow_class("rc_cwd_wf:W").roles == ("generator",)
        assert sys.path[-1] == str(tmp_path)
    finally:
        sys.modules.pop("rc_cwd_wf", None)


def test_orch_workers_scores_each_worker_for_pass_at_k():
    """Workers' own solutions are graded: pass@k = some worker right; worker accuracy; and whether
    the synthesizer kept a right answer when one existed. Two episodes by hand (gold 42):
    workers [42, 41, 40] + final 42 -> oracle, 1/3 workers right, kept;
    workers [1, 2, 3] + final 42 -> no oracle (its final does not count for synthesis_acc)."""
    from rolecall.config import RewardCfg
    from rolecall.rewards.verifier import build_verifier
    from rolecall.algo.credit import credit
    from rolecall.algo.scoring import score
    wf = build_workflow("orch_workers", load_prompts("math"), {})
    replies = iter(["1. a\n2. b\n3. c", "\\boxed{42}", "\\boxed{41}", "\\boxed{40}", "\\boxed{42}",
                    "1. a\n2. b\n3. c", "\\boxed{1}", "\\boxed{2}", "\\boxed{3}", "\\boxed{42}"])
    eps = []
    for _ in range(2):
        eps += rollout(wf, [PROBLEM], 1, ScriptedEngine(lambda r: next(replies)), isolated(wf), lambda role: 32, 0.7)
    verifier = build_verifier(RewardCfg(math_checker="strict"))
    try:
        score(eps, verifier)
    finally:
        verifier.close()
    assert eps[0].graded_rewards == {"workers": [1.0, 0.0, 0.0]}
    m = credit(eps, wf)
    assert m == {"orch_workers/pass_at_k": 0.5, "orch_workers/worker_acc": pytest.approx(1 / 6),
                 "orch_workers/synthesis_acc": 1.0, "orch_workers/orchestrator_parsed": 1.0}
