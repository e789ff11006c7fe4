"""The deliberation workflow (MPDF) on a scripted engine, rewards by hand, and its meta-policy run."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from rolecall.config import load_config
from rolecall.diagnostics.summary import read_sittings
from rolecall.testing import ScriptedEngine
from rolecall.metapolicy import MetaPolicy, make_optimizer, read_checkpoint, save_checkpoint
from rolecall.metapolicy.rules import oracle_actions
from rolecall.metatrain.stages import labelled_states
from rolecall.metapolicy.state import CONCEDE, PERSIST, REFINE, AgentState
from rolecall.rollout import rollout
from rolecall.types import Problem
from rolecall.workflows import build_workflow, workflow_prompts
from rolecall.workflows.deliberation import concede_target, consensus
from workflow_helpers import score_strict

PROBLEM = Problem(uid="p0", prompt="12+30", answer="42")


def _script(first: list[str], refined: dict[str, str]):
    """First answers in call order; a REFINE reply chosen by the agent's own answer (the `1:` line)."""
    first = iter(first)

    def script(req):
        text = req.messages[-1]["content"]
        if text.startswith("Compare"):
            own = next(line for line in text.splitlines() if line.startswith("1: "))[3:]
            return refined[own]
        return next(first)
    return script


def _run(options: dict, script, problems=(PROBLEM,)):
    wf = build_workflow("deliberation", workflow_prompts("deliberation", None), options)
    routes = {role: "agent" for role in wf.roles}
    from rolecall.config import RewardCfg
    from rolecall.rewards.verifier import build_verifier
    from rolecall.rewards.verifier import as_check
    verifier = build_verifier(RewardCfg(math_checker="strict"))
    try:
        eps = rollout(wf, list(problems), 1, ScriptedEngine(script), routes, lambda r: 32, 0.7,
                      check=as_check(verifier))
    finally:
        verifier.close()
    score_strict(eps)
    return wf, eps


def test_counterfactual_rewards_by_hand():
    # Round 0: agents say 42 (right), 41, 40. Refining turns 42 into 7 and 41/40 into 42.
    script = _script([r"\boxed{42}", r"\boxed{41}", r"\boxed{40}"],
                     {r"\boxed{42}": r"\boxed{7}", r"\boxed{41}": r"\boxed{42}", r"\boxed{40}": r"\boxed{42}"})
    wf, (ep,) = _run({"rounds": 1, "counterfactual": True}, script)
    rows = {r["agent"]: r["rewards"] for r in ep.info["deliberation_corpus"]}
    # r = (right after - right before) + (consensus right - consensus of the others right)
    # agent0 (right): PERSIST keeps 42 and the others alone would say 41 -> 0 + (1 - 0);
    #   REFINE -> 7: -1 + (0 - 0); CONCEDE to agent1 (41; ties go to the lower agent): -1 + 0.
    assert rows[0] == [1.0, -1.0, -1.0]
    # agent1 (wrong): PERSIST: 0 + (1 - 1); REFINE -> 42: 1 + (1 - 1); CONCEDE to agent0 (42): the same.
    assert rows[1] == [0.0, 1.0, 1.0]
    assert rows[2] == [0.0, 1.0, 1.0]
    assert all(r["behaviour"] == "persist" and r["round"] == 0 for r in ep.info["deliberation_corpus"])
    assert ep.final_answer == r"\boxed{42}" and ep.reward == 1.0
    # Branches reuse the shared round: only the REFINE branches called the model again (3 agents).
    assert sum(t.prompt_text.startswith("Compare") for t in ep.turns) == 3


def test_counterfactual_branches_play_to_the_end():
    # Two rounds, always REFINE: agent0's PERSIST branch at round 0 still refines in round 1.
    replies = {r"\boxed{42}": r"\boxed{42}", r"\boxed{41}": r"\boxed{42}", r"\boxed{40}": r"\boxed{40}",
               r"\boxed{9}": r"\boxed{9}"}
    script = _script([r"\boxed{9}", r"\boxed{41}", r"\boxed{40}"], replies)
    wf, (ep,) = _run({"rounds": 2, "deliberator": "refine", "counterfactual": True}, script)
    round0 = {r["agent"]: r["rewards"] for r in ep.info["deliberation_corpus"] if r["round"] == 0}
    # agent1 (41): PERSIST keeps 41 in round 0 (r_local 0) but round 1 refines it to 42: the final table
    # is [9, 42, 40] -> a three-way tie goes to agent0 (9, wrong); without agent1: [9, 40] -> 9 (wrong).
    assert round0[1][PERSIST] == 0.0
    # agent1 REFINE: 41 -> 42 now (r_local 1); final [9, 42, 40] as well -> 1 + (0 - 0).
    assert round0[1][REFINE] == 1.0
    # agent1 CONCEDE: to the lower of two single peers, agent0 (9): 0 + 0; round 1 keeps 9 -> [9, 9, 40] -> 9.
    assert round0[1][CONCEDE] == 0.0
    assert len(ep.info["deliberation_corpus"]) == 6  # 2 rounds x 3 agents


def test_actions_change_the_table_and_consensus_is_the_majority():
    script = _script([r"\boxed{41}" + "\nConfidence: 0.9", r"\boxed{42}", r"\boxed{42}"], {})
    wf, (ep,) = _run({"rounds": 1, "deliberator": "concede"}, script)
    log = ep.info["deliberation"]
    assert log["actions"] == [["concede"] * 3]
    # agent0 adopts the larger group (42); agents 1 and 2 see groups {41} and {42} of one each,
    # so the higher self-reported confidence wins: 41.
    assert log["answers"] == [["41", "42", "42"], ["42", "41", "41"]]
    assert ep.final_answer.startswith(r"\boxed{41}") and ep.reward == 0.0
    assert ep.grades("before") == [1.0]  # round-0 consensus was 42
    m = wf.metrics([ep])
    assert m["deliberation/acc_before"] == 1.0 and m["deliberation/acc_after"] == 0.0
    assert m["deliberation/round0_concede"] == 1.0 and m["deliberation/agreement"] == pytest.approx(2 / 3)


def test_oracle_deliberator_persists_right_and_concedes_to_right_peers():
    assert oracle_actions([True, False, False]) == [PERSIST, CONCEDE, CONCEDE]
    assert oracle_actions([False, False]) == [REFINE, REFINE]
    script = _script([r"\boxed{42}", r"\boxed{41}", r"\boxed{41}"], {})
    wf, (ep,) = _run({"rounds": 1, "deliberator": "oracle"}, script)
    assert ep.info["deliberation"]["actions"] == [["persist", "concede", "concede"]]
    # agent1 and agent2 concede to the largest peer group: each other's 41 (size 1) vs 42 (size 1),
    # lower agent first -> agent1 takes agent0's 42, agent2 takes agent0's 42.
    assert ep.info["deliberation"]["answers"][-1] == ["42", "42", "42"] and ep.reward == 1.0


def test_consensus_and_concede_target_edge_cases():
    s = [AgentState(answer=None), AgentState(answer="x = 2"), AgentState(answer="x=2"), AgentState(answer="3")]
    assert consensus(s) == 1  # whitespace-insensitive groups; the first member of the largest group
    assert consensus([AgentState()] * 3) is None
    assert consensus(s, [0, 3]) == 3
    assert concede_target(s, 1) == 2  # its own group's other member outnumbers "3"
    assert concede_target([AgentState(answer="1"), AgentState()], 0) is None  # no peer answer: keep its own


def test_deliberation_options_are_checked(tmp_path):
    prompts = workflow_prompts("deliberation", None)
    with pytest.raises(ValueError, match="deliberator"):
        build_workflow("deliberation", prompts, {"deliberator": "always"})
    with pytest.raises(ValueError, match="agents"):
        build_workflow("deliberation", prompts, {"agents": 0})
    with pytest.raises(ValueError, match="rounds"):
        build_workflow("deliberation", prompts, {"rounds": -1})
    for name, value in (("critic", "yes"), ("answer_from", "last"), ("role_format", "words")):
        with pytest.raises(ValueError, match=f"workflow.options.{name}"):
            build_workflow("deliberation", prompts, {name: value})
    without = {k: v for k, v in prompts.items() if k != "critic"}
    build_workflow("deliberation", without, {})  # no critic, no critic template needed
    with pytest.raises(ValueError, match="no template 'critic'"):
        build_workflow("deliberation", without, {"critic": True})
    bad = tmp_path / "x.ckpt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="not a meta-policy checkpoint"):
        build_workflow("deliberation", prompts, {"deliberator": str(bad)})


def test_a_checkpoint_deliberates(tmp_path):
    torch.manual_seed(0)
    policy = MetaPolicy(hidden=8, heads=2)
    with torch.no_grad():  # make REFINE always win
        policy.head[-1].bias.copy_(torch.tensor([0.0, 50.0, 0.0]))
    path = save_checkpoint(tmp_path / "m.ckpt", policy, make_optimizer(policy, 1e-3), 3, {"hidden": 8, "heads": 2})
    script = _script([r"\boxed{41}", r"\boxed{41}", r"\boxed{40}"], {r"\boxed{41}": r"\boxed{42}", r"\boxed{40}": r"\boxed{42}"})
    wf, (ep,) = _run({"rounds": 1, "deliberator": str(path)}, script)
    assert ep.info["deliberation"]["actions"] == [["refine"] * 3] and ep.reward == 1.0


def test_labelled_states_follow_the_graded_tables():
    script = _script([r"\boxed{42}", r"\boxed{41}", r"\boxed{40}"], {})
    wf, (ep,) = _run({"rounds": 2, "deliberator": "persist"}, script)
    rows = labelled_states([ep], 3)
    assert [r["label"] for r in rows] == [PERSIST, CONCEDE, CONCEDE] * 2
    assert [r["round"] for r in rows] == [0, 0, 0, 1, 1, 1]
    assert rows[0]["own"][0] == 1.0 and len(rows[0]["peers"]) == 2


DELIB = ["workflow.name=deliberation", "routing.agent=base", "metapolicy.name=meta"]


@pytest.mark.parametrize("overrides, match", [
    (["workflow.name=voting", "metapolicy.name=meta"], "deliberation"),
    (["workflow.name=deliberation", "routing=shared", "metapolicy.name=meta"], "trainable"),
    ([*DELIB, "metapolicy.heads=3"], "multiple"),
    ([*DELIB, "workflow.options.deliberator=refine"], "set by the meta-policy"),
])
def test_metapolicy_config_is_validated(overrides, match):
    with pytest.raises(Exception, match=match):
        load_config(None, overrides)


def test_metapolicy_name_must_not_be_an_llm_policy():
    with pytest.raises(Exception, match="LLM policy"):
        load_config(None, ["workflow.name=deliberation", "routing.agent=meta", "policies.meta.trainable=false",
                           "metapolicy.name=meta"])


# --- the meta-policy run: stages, run directory, kill and resume ---------------------------------

CONFIG = """
workflow: {name: deliberation, options: {agents: 3, rounds: 2}}
routing: {agent: base}
task: {n_val: 12}
rollout: {max_new_tokens: 48}
train: {threads: 1}
metapolicy: {sft_problems: 12, corpus_problems: 10, sft_epochs: 3, epochs: 400, batch_size: 16,
             checkpoint_every: 40, eval_every: 40}
"""


def _train(cfg_path: Path, out: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    args = [sys.executable, "-m", "rolecall", "train", *((str(cfg_path), "--out", str(out)) if not extra else extra)]
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _weights(path: Path) -> dict:
    return read_checkpoint(path)["policy"]


def test_meta_policy_run_killed_in_softrank_resumes_to_the_same_weights(tmp_path):
    cfg = tmp_path / "delib.yaml"
    cfg.write_text(CONFIG)
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    proc = _train(cfg, whole)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    report = json.loads((whole / "deliberation.json").read_text())
    assert set(report["validation"]) == {"persist", "refine", "concede", "sft", "trained", "oracle"}
    folder = whole / "checkpoints" / "policy-meta"
    assert {p.name for p in folder.iterdir()} >= {"states.json", "sft.ckpt", "corpus.json", "softrank.ckpt", "final.ckpt"}
    rows = [json.loads(x) for x in (whole / "metrics.jsonl").read_text().splitlines()]
    assert {r["stage"] for r in rows} == {"states", "sft", "corpus", "softrank", "softrank_eval", "eval"}
    assert any("policy/meta/softrank/rank_loss" in r for r in rows)

    # The same run, SIGKILLed while it evaluates the policy after a SoftRankPO checkpoint.
    proc = _train(cfg, cut)
    ckpt = cut / "checkpoints" / "policy-meta" / "softrank.ckpt"
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        if ckpt.exists():
            try:
                step = read_checkpoint(ckpt)["step"]
            except ValueError:
                step = 0
            if 0 < step:
                break
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    killed_at = read_checkpoint(ckpt)["step"]
    total = 400 * -(-len(json.loads((cut / "checkpoints/policy-meta/corpus.json").read_text())["data"]) // 16)
    assert 0 < killed_at < total
    assert not (cut / "deliberation.json").exists()

    proc = _train(cfg, cut, "--resume", str(cut))
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    assert f"resumes at step {killed_at}" in out
    assert (cut / "checkpoints/policy-meta/corpus.json").read_bytes() == (folder / "corpus.json").read_bytes()
    a, b = _weights(folder / "final.ckpt"), _weights(cut / "checkpoints/policy-meta/final.ckpt")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    steps = [r["step"] for r in map(json.loads, (cut / "metrics.jsonl").read_text().splitlines()) if r["stage"] == "softrank"]
    assert steps == list(range(1, total + 1))  # nothing logged twice, nothing lost
    # each sitting says which stage and step it began at: the first at the start, the resume at its checkpoint
    assert [(s["stage"], s["step"]) for s in read_sittings(cut)] == [("states", 0), ("softrank", killed_at)]
    assert [(s["stage"], s["step"]) for s in read_sittings(whole)] == [("states", 0)]


def test_a_signal_in_the_corpus_stage_stops_at_once_keeping_the_finished_stages(tmp_path):
    """The corpus stage saves only when it ends (20 minutes on SmolLM2): a first SIGTERM used to
    wait for its end, past any scheduler's grace period. Now it stops at once; states and the
    bootstrap stay, and the command to continue is named."""
    cfg = tmp_path / "delib.yaml"
    cfg.write_text(CONFIG.replace("corpus_problems: 10", "corpus_problems: 2000"))
    out = tmp_path / "run"
    proc = _train(cfg, out)
    folder = out / "checkpoints" / "policy-meta"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and not (folder / "sft.ckpt").exists():
        time.sleep(0.02)
    if proc.poll() is not None:
        pytest.fail(f"the run ended before the corpus stage:\n{proc.communicate()[0]}")
    states = (folder / "states.json").read_bytes()
    proc.send_signal(signal.SIGTERM)
    try:
        text, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"the stop waited for the stage to end:\n{proc.communicate()[0]}")
    assert proc.returncode == 128 + signal.SIGTERM, text
    assert "in the corpus stage" in text and f"rolecall train --resume {out}" in text, text
    assert "Traceback" not in text, text
    assert not (folder / "corpus.json").exists() and (folder / "states.json").read_bytes() == states
    stages = {json.loads(x)["stage"] for x in (out / "metrics.jsonl").read_text().splitlines()}
    assert stages == {"states", "sft"}


def test_the_example_config_trains_a_meta_policy_end_to_end(tiny_model_dir, tmp_path):
    from typer.testing import CliRunner

    from rolecall.cli import app

    example = Path(__file__).parent.parent / "configs" / "examples" / "deliberation.yaml"
    out = tmp_path / "r"
    res = CliRunner().invoke(app, ["train", str(example), f"model.path={tiny_model_dir}", "task.n_val=4",
                                   "rollout.max_new_tokens=4", "metapolicy.sft_problems=3", "metapolicy.corpus_problems=2",
                                   "metapolicy.sft_epochs=2", "metapolicy.epochs=2", "--out", str(out)])
    assert res.exit_code == 0, res.output
    report = json.loads((out / "deliberation.json").read_text())
    assert report["policy"] == "meta" and report["states"] == 3 * 3 * 3 and report["corpus"] == 2 * 3 * 3
    assert all(0.0 <= arm["accuracy"] <= 1.0 for arm in report["validation"].values())
    assert (out / "summary.json").exists() and (out / "fingerprint.json").exists()
    # The trained policy plays in an ordinary run of the workflow.
    wf = build_workflow("deliberation", workflow_prompts("deliberation", None),
                        {"deliberator": report["checkpoints"]["trained"]})
    assert type(wf.deliberator).__name__ == "MetaDeliberator"
    # A changed metapolicy setting refuses the resume.
    res = CliRunner().invoke(app, ["train", "--resume", str(out), "metapolicy.lr=0.5"])
    assert res.exit_code != 0 and "metapolicy settings ['lr'] differ" in res.output


def test_workflows_import_without_torch_or_model_libraries():
    """The deliberation workflow reads states with plain Python; the network loads only when a checkpoint decides."""
    code = ("import sys, rolecall.workflows, rolecall.metapolicy; "
            "print(sorted(m for m in ('torch', 'transformers', 'peft') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def _critic_script(first: list[str], refined: dict[str, str], verdict, seen: list[str]):
    """`_script`, and a critic that judges a reply by `verdict(solution)`; `seen` logs what it judged."""
    agents = _script(first, refined)

    def script(req):
        text = req.messages[-1]["content"]
        if text.startswith("Check the solution"):
            solution = text.split("Solution: ", 1)[1]
            seen.append(solution)
            return verdict(solution)
        return agents(req)
    return script


def test_the_critic_judges_each_reply_once_and_its_verdict_joins_the_state():
    from rolecall.metapolicy.state import FEATURES
    seen: list[str] = []
    script = _critic_script([r"\boxed{42}", r"\boxed{41}", r"\boxed{41}"],
                            {r"\boxed{41}": r"\boxed{42}", r"\boxed{42}": r"\boxed{42}"}, lambda sol: r"\boxed{Correct}" if "42" in sol else r"\boxed{Incorrect}", seen)
    wf, (ep,) = _run({"rounds": 2, "deliberator": "refine", "critic": True}, script)
    assert wf.roles == ("agent", "critic")
    correct, missing = FEATURES.index("critic_correct"), FEATURES.index("critic_missing")
    feats = ep.info["deliberation"]["features"]
    # round 0: agent0 holds 42 (Correct), agents 1 and 2 hold 41 (Incorrect), as their peers see them too
    own0 = [own for own, _ in feats[0]]
    assert [v[correct] for v in own0] == [1.0, 0.0, 0.0] and all(v[missing] == 0.0 for v in own0)
    assert [p[correct] for p in feats[0][0][1]] == [0.0, 0.0]
    # round 1: every agent refined to 42: judged Correct
    assert [own[correct] for own, _ in feats[1]] == [1.0, 1.0, 1.0]
    # one critic call per distinct reply of the episode: 42 and 41 (41's refinement, 42, is known)
    assert sorted(seen) == [r"\boxed{41}", r"\boxed{42}"]
    assert sum(t.role == "critic" for t in ep.turns) == 2


def test_the_critic_and_branches_share_verdicts_and_plain_text_reads():
    seen: list[str] = []
    script = _critic_script(["The answer is 42.\nConfidence: 0.9", "I think 41", "41"], {"I think 41": "It is 42", "41": "40",
                                                                                        "The answer is 42.": "42"},
                            lambda sol: "Correct." if "42" in sol else "That is wrong.", seen)
    wf, (ep,) = _run({"rounds": 1, "critic": True, "counterfactual": True, "role_format": "plain",
                      "answer_from": "boxed_or_last_number"}, script)
    log = ep.info["deliberation"]
    assert log["answers"][0] == ["42", "41", "41"]  # plain answers, not the confidence's 0.9
    from rolecall.metapolicy.state import FEATURES
    correct = FEATURES.index("critic_correct")
    assert [own[correct] for own, _ in log["features"][0]] == [1.0, 0.0, 0.0]
    # nine branches, yet each distinct reply was judged once
    assert len(seen) == len(set(seen)) and set(seen) == {"The answer is 42.\nConfidence: 0.9", "I think 41", "41",
                                                          "It is 42", "40", "42"}


def test_no_critic_means_missing_verdicts():
    from rolecall.metapolicy.state import FEATURES
    script = _script([r"\boxed{42}", r"\boxed{41}", r"\boxed{40}"], {})
    wf, (ep,) = _run({"rounds": 1}, script)
    own = ep.info["deliberation"]["features"][0][0][0]
    assert wf.roles == ("agent",) and own[FEATURES.index("critic_missing")] == 1.0
    assert own[FEATURES.index("critic_correct")] == 0.5 and not any(t.role == "critic" for t in ep.turns)


def test_a_checkpoint_of_another_state_size_is_refused_by_name(tmp_path):
    from rolecall.metapolicy.state import STATE_DIM
    old = MetaPolicy(state_dim=STATE_DIM - 2, hidden=8, heads=2)  # before the critic's two features
    path = save_checkpoint(tmp_path / "old.ckpt", old, make_optimizer(old, 1e-3), 3, {"hidden": 8, "heads": 2})
    with pytest.raises(ValueError, match=f"reads states of {STATE_DIM - 2} features; this rolecall's have {STATE_DIM}"):
        build_workflow("deliberation", workflow_prompts("deliberation", None), {"deliberator": str(path)})
