"""Non-finite values: a NaN/Inf loss, gradient or reward changes no weight and
no optimizer state, is counted, and K consecutive ones halt the run naming step and source."""
from __future__ import annotations

import copy
import json
import math
import random

import pytest
import torch
from typer.testing import CliRunner

import rolecall.compose.parts as parts
import rolecall.train.launch as launch
import rolecall.train.loop as loop
import rolecall.algo.optim as optim
import rolecall.algo.update as update
from rolecall.cli import app
from rolecall.config import load_config
from rolecall.engines.base import GenRequest
from rolecall.rewards.base import Score
from rolecall.algo.batch import Row
from rolecall.rundir.guards import NonFiniteStreak, nonfinite_sources
from rolecall.train.stack import build_stack
from rolecall.algo.credit import advantages
from rolecall.algo.scoring import score
from rolecall.algo.update import update_policy
from rolecall.types import Episode, Problem, Turn

NAN, INF = float("nan"), float("inf")
# The smallest run that trains: one problem, two samples, one generator call each.
BASE_ARGS = ["workflow.name=single", "rollout.problems_per_step=1", "rollout.group_size=2", "task.n_val=1",
             "rollout.max_new_tokens=3", "train.threads=2", "train.diagnostics=basic", "train.val_every=100",
             "train.checkpoint_every=100", "train.samples_per_step=0", "train.val_samples=0"]


@pytest.fixture(scope="module")
def stack(tiny_model_dir):
    return build_stack(load_config(None, [f"model.path={tiny_model_dir}", *BASE_ARGS]))


def _rows(stack, n=6):
    """Real sampled generator turns with alternating advantages (a non-zero gradient)."""
    torch.manual_seed(0)
    outs = stack.engine.generate([GenRequest([{"role": "user", "content": f"{i}+{i}"}], "generator", 6)
                                  for i in range(n)], temperature=1.0)
    return [Row(o.prompt_ids + o.completion_ids, len(o.prompt_ids), o.logprobs, (-1.0) ** i, "generator", "generator0")
            for i, o in enumerate(outs)]


def _update(stack, rows, mini_batches=1):
    algo = stack.cfg.algo.model_copy(update={"mini_batches": mini_batches})
    return update_policy(stack.model, "generator", rows, stack.optims["generator"], algo, stack.cfg.optim,
                         pad_id=stack.tok.pad_token_id, temperature=1.0, rng=random.Random(0))[1]


def _state(stack) -> dict:
    """Everything an update may touch: every parameter, AdamW's state, the schedule."""
    popt = stack.optims["generator"]
    return {"params": {n: p.detach().clone() for n, p in stack.model.named_parameters()},
            "optim": copy.deepcopy(popt.optimizer.state_dict()),
            "sched": (popt.schedule.taken, popt.schedule.lr)}


def _assert_bit_identical(a: dict, b: dict) -> None:
    assert a["params"].keys() == b["params"].keys()
    changed = [n for n in a["params"] if not torch.equal(a["params"][n], b["params"][n])]
    assert not changed, changed[:3]
    sa, sb = a["optim"]["state"], b["optim"]["state"]
    assert sa.keys() == sb.keys() and sa, "AdamW has no state yet: the test would prove nothing"
    for i in sa:
        for k in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(sa[i][k], sb[i][k]), (i, k)
    assert a["optim"]["param_groups"] == b["optim"]["param_groups"]
    assert a["sched"] == b["sched"]


@pytest.fixture
def warmed(stack):
    """The generator's optimizer after one good step, so its moments are non-trivial."""
    pol = _update(stack, _rows(stack))
    assert pol["nonfinite_loss"] == pol["nonfinite_grad"] == 0
    return stack


def _poisoned(real_loss, when=lambda: True):
    """The update's objective, NaN whenever `when()` says so."""
    def loss(*a, **k):
        value = real_loss(*a, **k)
        return value * NAN if when() else value
    return loss


def test_nan_loss_changes_no_weight_and_no_optimizer_state(warmed, monkeypatch):
    monkeypatch.setattr(update, "_objective", _poisoned(update._objective))
    before = _state(warmed)
    pol = _update(warmed, _rows(warmed))
    _assert_bit_identical(before, _state(warmed))
    assert (pol["nonfinite_loss"], pol["nonfinite_grad"]) == (1, 0)
    assert all(p.grad is None for p in warmed.optims["generator"].params)  # no stale gradient left behind


def test_inf_gradient_changes_no_weight_and_no_optimizer_state(warmed):
    param = warmed.optims["generator"].params[0]
    hook = param.register_hook(lambda g: g + INF)  # a finite loss whose gradient overflows
    try:
        before = _state(warmed)
        pol = _update(warmed, _rows(warmed))
    finally:
        hook.remove()
    _assert_bit_identical(before, _state(warmed))
    assert (pol["nonfinite_loss"], pol["nonfinite_grad"]) == (0, 1)
    assert math.isnan(pol["grad_norm"])  # no optimizer step, so no norm to report


@pytest.mark.parametrize("lr", [INF, NAN, 1e300])
def test_a_nonfinite_update_changes_no_weight_and_no_optimizer_state(warmed, monkeypatch, lr):
    """A learning rate the schema would refuse (set here behind its back): NaN/Inf is never applied;
    a finite one so large that the step leaves weights Inf/NaN is taken and undone. Either way the
    update is counted as `nonfinite_update`, the run's guard sees it, and nothing crashes."""
    popt = warmed.optims["generator"]
    monkeypatch.setattr(popt.schedule, "cfg", popt.schedule.cfg.model_copy(update={"lr": lr}))  # no validation
    before = _state(warmed)
    pol = _update(warmed, _rows(warmed))
    _assert_bit_identical(before, _state(warmed))
    assert (pol["nonfinite_loss"], pol["nonfinite_grad"], pol["nonfinite_update"]) == (0, 0, 1)
    assert nonfinite_sources({f"policy/generator/{k}": v for k, v in pol.items() if k.startswith("nonfinite")}) == \
        ["update of policy 'generator'"]
    assert all(p.grad is None for p in popt.params)
    monkeypatch.undo()
    assert _update(warmed, _rows(warmed))["nonfinite_update"] == 0  # the same rows train at the real rate


def test_the_schedule_counts_only_optimizer_steps_taken(warmed, monkeypatch):
    """Two mini-batches: both good -> two optimizer and two scheduler steps; the second NaN -> one of each."""
    popt = warmed.optims["generator"]
    for bad_call, taken in ((None, 2), (2, 1)):
        calls = []
        monkeypatch.setattr(update, "_objective",
                            _poisoned(update._objective, lambda: calls.append(1) or len(calls) == bad_call))
        epoch, steps = popt.schedule.taken, _adam_steps(popt)
        pol = _update(warmed, _rows(warmed), mini_batches=2)
        monkeypatch.undo()  # the real loss again for the next case
        assert len(calls) == 2 and pol["nonfinite_loss"] == 2 - taken
        assert (popt.schedule.taken - epoch, _adam_steps(popt) - steps) == (taken, taken)


def _adam_steps(popt) -> int:
    return int(next(iter(popt.optimizer.state.values()))["step"])


def test_nonfinite_rewards_are_excluded_from_group_statistics_and_counted():
    """Rewards [1, NaN, 0, Inf] in one group: the pair (1, 0) is normalised, NaN/Inf get A = 0."""

    class Broken:
        name = "broken"

        def score_many(self, completions, problems):
            return [Score({"a": 1.0, "b": NAN, "c": 0.0, "d": INF}[c], "ok") for c in completions]

    eps = [Episode(Problem("p", "q", "x"), g, [Turn("generator", "generator", "generator", "", "")], final_answer=c)
           for g, c in enumerate("abcd")]
    m = score(eps, Broken())
    assert [e.reward for e in eps] == [1.0, None, 0.0, None]
    assert [e.status for e in eps] == ["ok", "nonfinite", "ok", "nonfinite"]
    assert eps[1].nonfinite_reward == "nan" and eps[3].nonfinite_reward == "inf"
    assert m["reward/status_nonfinite"] == 0.5
    _, adv, _ = advantages(eps, "grpo", None)
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    assert adv == pytest.approx([a, 0.0, -a, 0.0])


def test_streak_names_step_and_source_and_resets_on_a_good_step():
    streak = NonFiniteStreak(2)
    bad_grad = {"policy/generator/nonfinite_grad": 1, "policy/aggregator/nonfinite_grad": 0, "nonfinite/reward": 0.0}
    assert streak.observe(1, bad_grad) is None
    assert streak.observe(2, {"policy/generator/nonfinite_grad": 0, "nonfinite/reward": 0.0}) is None  # reset
    assert streak.observe(3, {"nonfinite/reward": 3.0}) is None
    halt = streak.observe(4, bad_grad)
    assert isinstance(halt, RuntimeError)
    assert str(halt).startswith("halted at step 4: 2 steps in a row had non-finite values "
                                "(source: gradient of policy 'generator')")
    assert nonfinite_sources({"policy/g/nonfinite_loss": 2, "nonfinite/reward": 1.0}) == \
        ["loss of policy 'g'", "reward of 1 episode"]


def _nan_loss_on_steps(monkeypatch, bad_steps: set[int]) -> None:
    """Make every loss of the listed training steps NaN (all policies)."""
    current = {"step": 0}
    real_step = loop.train_step

    def train_step(stack, step):
        current["step"] = step
        return real_step(stack, step)
    monkeypatch.setattr(loop, "train_step", train_step)
    monkeypatch.setattr(update, "_objective", _poisoned(update._objective, lambda: current["step"] in bad_steps))


def _step_rows(out):
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r for r in rows if "val/accuracy" not in r and "alarm" not in r}


def test_k_consecutive_nonfinite_steps_halt_the_run_naming_step_and_source(tiny_model_dir, tmp_path, monkeypatch):
    """K = 2: bad step 1, good step 2 (no halt), bad steps 3 and 4 -> halt at step 4 with a checkpoint."""
    _nan_loss_on_steps(monkeypatch, {1, 3, 4})
    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["train", f"model.path={tiny_model_dir}", *BASE_ARGS, "train.max_nonfinite_steps=2",
                                   "--steps", "6", "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert "halted at step 4: 2 steps in a row had non-finite values" in res.output
    assert "(source: loss of policy 'generator')" in res.output
    rows = _step_rows(out)
    assert sorted(rows) == [1, 2, 3, 4]
    assert [rows[s]["nonfinite/loss"] for s in (1, 2, 3, 4)] == [1, 0, 1, 1]
    assert all(rows[s]["nonfinite/grad"] == rows[s]["nonfinite/reward"] == 0 for s in rows)
    assert (out / "checkpoints" / "step_4").is_dir()


def test_an_infinite_learning_rate_halts_the_run_in_one_line_with_a_checkpoint(tiny_model_dir, tmp_path, monkeypatch):
    """The learning rate Inf behind the schema's back: no weight turns NaN (the next rollout would
    crash sampling from NaN logits); the update is skipped and counted, and the guard halts."""
    monkeypatch.setattr(optim.LrSchedule, "at", lambda self, progress: INF)
    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["train", f"model.path={tiny_model_dir}", *BASE_ARGS, "train.max_nonfinite_steps=2",
                                   "--steps", "3", "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output, res.output
    assert "halted at step 2: 2 steps in a row had non-finite values (source: update of policy 'generator')" in \
        " ".join(res.output.split())
    rows = _step_rows(out)
    assert [rows[s]["nonfinite/update"] for s in (1, 2)] == [1, 1]
    assert (out / "checkpoints" / "step_2").is_dir()


def test_nonfinite_rewards_halt_the_run(tiny_model_dir, tmp_path, monkeypatch):
    """A verifier returning NaN for everything: nothing reaches the estimator, the run halts on reward."""

    class NaNVerifier:
        name = "nan"

        def score_many(self, completions, problems):
            return [Score(NAN, "ok") for _ in completions]

        def close(self):
            pass
    monkeypatch.setattr(parts, "build_verifier", lambda cfg: NaNVerifier())
    with pytest.raises(RuntimeError, match=r"halted at step 2: 2 steps in a row .* \(source: reward of 2 episodes\)"):
        launch.train(load_config(None, [f"model.path={tiny_model_dir}", *BASE_ARGS, "train.max_nonfinite_steps=2",
                                      "reward.max_skipped_steps=3", "train.steps=5"]), tmp_path / "run")
    rows = _step_rows(tmp_path / "run")
    assert [rows[s]["nonfinite/reward"] for s in (1, 2)] == [2, 2]
    assert rows[1]["reward/status_nonfinite"] == 1.0
