"""examples/collaboration_game.py: the reward rules of the collaboration game, its exact best
response, and that co-training reaches collaboration where a best-responding single learner
does not."""
from __future__ import annotations

import importlib.util
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location("collaboration_game", REPO / "examples" / "collaboration_game.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["collaboration_game"] = mod  # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


cg = _load()
A0, A1 = cg.COLLABORATE, cg.INDEPENDENT


# -- reward rules -----------------------------------------------------------------------------------
def test_rewards_switch_to_synergy_the_turn_after_the_count_reaches_c():
    q = cg.Question(threshold=3, r_col=0.2, r_ind=0.5)
    ra, rb = cg.episode_rewards(q, [A0, A0, A1, A1, A0], [A1, A0, A0, A1, A1])
    # turn 0: count 0 -> 1; turn 1: 1 -> 3 = C, still paid by action; turns 2-4: synergy
    assert ra == [0.2, 0.2, 1.0, 1.0, 1.0]
    assert rb == [0.5, 0.2, 1.0, 1.0, 1.0]


def test_one_short_of_the_threshold_is_no_synergy():
    q = cg.Question(threshold=4, r_col=0.3, r_ind=0.6)
    # count after each turn: 2, 3, 3, 4 -> synergy only on turn 4
    ra, rb = cg.episode_rewards(q, [A0, A0, A1, A1, A1], [A0, A1, A1, A0, A0])
    assert ra == [0.3, 0.3, 0.6, 0.6, 1.0]
    assert rb == [0.3, 0.6, 0.6, 0.3, 1.0]
    never = cg.episode_rewards(q, [A0, A1, A0, A1], [A1, A1, A0, A1])[0]  # count stays at 3
    assert never == [0.3, 0.6, 0.3, 0.6]


def test_threshold_zero_is_synergy_from_the_first_turn():
    q = cg.Question(threshold=0, r_col=0.1, r_ind=0.4)
    assert cg.episode_rewards(q, [A1, A0], [A1, A1]) == ([1.0, 1.0], [1.0, 1.0])
    assert cg.best_response(q, 2, 0.5).value[0, 0] == pytest.approx(2.0)


def test_vectorised_rollout_pays_what_the_reference_rules_pay():
    questions = [cg.Question(4, 0.2, 0.5), cg.Question(6, 0.35, 0.45)]
    tables = cg.Tables(questions, turns=5)
    rng = np.random.default_rng(0)
    logits = [rng.normal(0, 1.5, tables.n_states) for _ in range(2)]
    batch = cg.rollout(tables, logits, None, 200, np.random.default_rng(1))
    assert batch.from_start.all() and 0 < batch.synergy.mean() < 1
    for e in range(200):
        q = questions[batch.question[e]]
        actions_a, actions_b = (batch.actions[i][:, e].astype(int).tolist() for i in (0, 1))
        ra, rb = cg.episode_rewards(q, actions_a, actions_b)
        assert batch.returns[0][0, e] == pytest.approx(sum(ra))
        assert batch.returns[1][0, e] == pytest.approx(sum(rb))


# -- exact best response ----------------------------------------------------------------------------
def test_dp_reproduces_observation_1_at_two_turns():
    """T = 2, C = 2: collaborate iff (R_syn - R_ind) pi >= R_ind - R_col."""
    checked = 0
    for pi in np.linspace(0.05, 0.95, 19):
        for r_col in np.linspace(0.0, 0.8, 9):
            for r_ind in np.linspace(r_col + 0.05, 0.95, 7):
                lhs, rhs = (1 - r_ind) * pi, r_ind - r_col
                if abs(lhs - rhs) < 1e-6:
                    continue  # a tie: either action is optimal
                br = cg.best_response(cg.Question(2, float(r_col), float(r_ind)), 2, float(pi))
                assert br.collaborate[0, 0] == (lhs > rhs), (pi, r_col, r_ind)
                checked += 1
    assert checked > 500


def test_best_response_avoids_against_non_strategic_partners_for_the_chosen_questions():
    game = cg.GameSpec()
    questions, _ = cg.sample_questions(game)
    assert len(questions) == game.n_questions
    for q in questions:
        assert q.threshold in (12, 14) and q.r_col < q.r_ind
        for pi in (0.5, 0.6, 0.7):
            br = cg.best_response(q, game.turns, pi)
            assert not br.collaborate[0, 0]
            assert cg.best_response_rate(q, game.turns, pi) == 0.0
        assert cg.best_response_rate(q, game.turns, 1.0) == 1.0  # mutual collaboration is an equilibrium


def test_best_response_collaborates_when_the_threshold_is_small():
    """The DP is not 'never': with C = 2 one joint turn unlocks synergy for the rest."""
    q = cg.Question(threshold=2, r_col=0.3, r_ind=0.5)
    br = cg.best_response(q, 10, 0.5)
    assert br.collaborate[0, 0]
    assert cg.best_response_rate(q, 10, 0.5) > 0.5
    assert cg.switch_point(q, 10) < 0.5


def test_exact_evaluation_of_the_best_response_attains_its_dp_value():
    q = cg.Question(threshold=12, r_col=0.329, r_ind=0.548)
    for pi in (0.5, 0.8, 0.95):
        br = cg.best_response(q, 10, pi)
        ev = cg.evaluate(q, 10, br.collaborate.astype(float), pi)
        assert ev.return_a == pytest.approx(br.value[0, 0])
        # and nothing does better: a random table falls short
        rand = np.random.default_rng(0).random((10, 12))
        assert cg.evaluate(q, 10, rand, pi).return_a < br.value[0, 0]


# -- learning -------------------------------------------------------------------------------------
def test_co_trained_pair_collaborates_where_the_single_learner_does_not():
    q = cg.Question(threshold=12, r_col=0.133, r_ind=0.405)  # best response switches at pi = 0.79
    spec = cg.LearnerSpec(iterations=150, episodes=256)
    single = cg.train([q], 10, 0.5, 0, spec)
    pair = cg.train([q], 10, None, 0, spec)
    single_rate = cg.exact_outcome([q], 10, single, 0.5)[0].collab_rate_a
    pair_eval = cg.exact_outcome([q], 10, pair, None)[0]
    assert single_rate < 0.1
    assert min(pair_eval.collab_rate_a, pair_eval.collab_rate_b) > 0.9
    assert pair_eval.return_a > cg.best_response(q, 10, 0.5).value[0, 0]  # and both are better off for it
    assert np.mean(pair.collab_rate[-10:]) > np.mean(single.collab_rate[-10:]) + 0.5


def test_experiment_writes_a_standalone_svg(tmp_path):
    game = cg.GameSpec(n_questions=2)
    spec = cg.LearnerSpec(iterations=6, episodes=64)
    results = cg.run_experiment(game, spec, seeds=[0, 1])
    assert set(results["arms"]) == {"single vs pi=0.5", "single vs pi=0.6", "single vs pi=0.7",
                                    "single vs pi=0.9", "co-trained pair"}
    assert len(results["arms"]["co-trained pair"]["curves"]["collab_rate"]["mean"]) == 6
    path = tmp_path / "plot.svg"
    cg.write_svg(results, path)
    root = ET.parse(path).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert len(root.findall(".//{http://www.w3.org/2000/svg}polyline")) == 2 * 5  # two panels, five arms


def test_the_recorded_command_runs_at_smoke_size_and_writes_a_record_with_provenance(tmp_path):
    """The command benchmarks/results/README.md names for collaboration_game.json, at smoke size."""
    import json
    import subprocess

    record, figure = tmp_path / "r.json", tmp_path / "f.svg"
    done = subprocess.run([sys.executable, "examples/collaboration_game.py", "--seeds", "0", "--iterations", "10",
                           "--record", str(record), "--figure", str(figure)], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(record.read_text())
    assert doc["arms"]["co-trained pair"]["curves"]["iteration"] == [0, 5, 9]  # thinned, the last kept
    assert doc["provenance"]["command"].startswith("python examples/collaboration_game.py --seeds 0")
    assert {"code", "versions", "machine", "date"} <= set(doc["provenance"])
    assert ET.parse(figure).getroot().tag == "{http://www.w3.org/2000/svg}svg"
    nowhere = subprocess.run([sys.executable, "examples/collaboration_game.py"], cwd=REPO, capture_output=True,
                             text=True, timeout=120)
    assert nowhere.returncode == 2 and "say where to write" in nowhere.stderr
