"""Diagnostics in a real (tiny) run: every metric for every role in metrics.jsonl, the optional
TensorBoard and W&B (offline) sinks, and alarm events logged once and printed once."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from rolecall.cli import app

OPTIMIZER = ("chi2_token", "chi2_seq", "training_ppl", "rollout_ppl", "kl", "k3_kl", "kl_ref", "entropy",
             "clip_frac", "grad_norm", "grad_share")
TRAJECTORY = ("len_p50", "len_p95", "truncated_frac", "boxed_rate", "hedge_rate", "terse_rate", "fence_rate",
              "prompt_tokens", "completion_tokens", "reward_mean")


def _train(model_dir, out, *args):
    return CliRunner().invoke(app, ["train", f"model.path={model_dir}", "rollout.problems_per_step=2",
                                    "rollout.group_size=4", "task.n_val=4", "rollout.max_new_tokens=6",
                                    "--steps", "2", "--out", str(out), *args])


def _rows(out):
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


class _MixedRewards:
    """Rewards that differ within groups, so advantages and gradients are non-zero: 0 and 1 by
    turns over the distinct texts graded (the parity of a text's length, tried first, gave one
    sampler's draw groups whose four answers were all odd)."""

    name = "math"

    def __init__(self):
        self.turn = 0

    def score_many(self, completions, problems):
        from rolecall.rewards import Score

        out = []
        for _ in completions:
            out.append(Score(float(self.turn % 2), "ok"))
            self.turn += 1
        return out

    def close(self):
        pass


@pytest.mark.parametrize("routing", ["isolated", "shared"])
def test_every_metric_for_every_role_and_the_sinks(tiny_model_dir, tmp_path, routing, monkeypatch):
    pytest.importorskip("tensorboard")
    pytest.importorskip("wandb")
    from rolecall.compose import parts

    monkeypatch.setattr(parts, "build_verifier", lambda cfg: _MixedRewards())
    out = tmp_path / "run"
    res = _train(tiny_model_dir, out, f"routing={routing}", "train.sinks=[tensorboard, wandb]")
    assert res.exit_code == 0, res.output
    steps = [r for r in _rows(out) if "reward/mean" in r and "event" not in r]
    assert steps
    for role in ("generator", "aggregator"):
        for m in OPTIMIZER + TRAJECTORY:
            assert f"role/{role}/{m}" in steps[0], (role, m)
    assert "role/generator/jaccard3" in steps[0]  # three parallel voter slots
    for key in ("voting/pass_at_k", "voting/selection_acc", "reward/mixed_group_frac", "reward/unscorable",
                "tokens/per_episode"):
        assert key in steps[0], key
    shares = [steps[0][f"role/{r}/grad_share"] for r in ("generator", "aggregator")]
    if routing == "shared":
        assert sum(shares) == pytest.approx(1.0, abs=1e-6)
    else:
        assert shares == [1.0, 1.0]
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    assert list((out / "wandb").glob("offline-run-*"))
    # The paper's run statistics are written at the end, from the same rows.
    from rolecall.diagnostics.summary import read_sittings, summarize
    summary = json.loads((out / "summary.json").read_text())
    assert summary == json.loads(json.dumps({**summarize(_rows(out)), "sittings": read_sittings(out)}))
    assert [s["step"] for s in summary["sittings"]] == [0]  # one sitting: the run never resumed
    policy = "shared" if routing == "shared" else "generator"
    assert summary["steps"] == steps[-1]["step"]
    assert summary["table2"]["policies"][policy]["chi2_token"]["first"] is not None
    # Optimizer steps follow the rows: 3 generator slots -> 3 steps under IP, 4 roles' slots -> 4 under SP.
    assert steps[0][f"policy/{policy}/optimizer_steps"] == (4 if routing == "shared" else 3)


def test_alarm_is_logged_once_and_printed_once(tiny_model_dir, tmp_path, monkeypatch):
    from rolecall.train import loop

    accs = iter([0.9, 0.2, 0.1])  # steps 0, 1, 2: a cliff at step 1 (and deeper at 2: same alarm)
    real = loop.validate_episodes

    def fake(stack, **kw):
        m, eps = real(stack, **kw)
        return {**m, "val/accuracy": next(accs)}, eps

    monkeypatch.setattr(loop, "validate_episodes", fake)
    out = tmp_path / "run"
    res = _train(tiny_model_dir, out, "train.val_every=1")
    assert res.exit_code == 0, res.output
    events = [r for r in _rows(out) if r.get("event") == "alarm"]
    assert [(e["alarm"], e["step"]) for e in events] == [("validation_cliff", 1)]
    assert res.output.count("validation_cliff") == 1


def test_unknown_sink_is_a_config_error(tiny_model_dir, tmp_path):
    res = _train(tiny_model_dir, tmp_path / "r", "train.sinks=[mlflow]")
    assert res.exit_code == 2 and "train.sinks" in res.output


def test_inspect_reads_one_role_across_steps(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    res = _train(tiny_model_dir, out, "train.val_every=1", "train.val_samples=2")
    assert res.exit_code == 0, res.output
    vals = [json.loads(x) for x in (out / "val_samples.jsonl").read_text().splitlines()]
    assert sorted({v["step"] for v in vals}) == [0, 1, 2]
    assert len({v["uid"] for v in vals}) == 2  # the same two problems at every validation
    res = CliRunner().invoke(app, ["inspect", str(out), "--role", "aggregator", "--steps", "0,2", "--chars", "2000"],
                             terminal_width=200)
    assert res.exit_code == 0, res.output
    assert "step 0" in res.output and "step 2" in res.output and "step 1" not in res.output
    first = next(v for v in vals if v["step"] == 2)
    agg = next(t for t in first["turns"] if t["role"] == "aggregator")
    assert f"{agg['tokens']} tokens" in res.output
    res = CliRunner().invoke(app, ["inspect", str(out), "--role", "judge"])
    assert res.exit_code == 2 and "roles here: ['aggregator', 'generator']" in res.output
    res = CliRunner().invoke(app, ["inspect", str(out), "--role", "generator", "--steps", "0,7"])
    assert res.exit_code == 2 and "no samples at [7]" in res.output
    res = CliRunner().invoke(app, ["inspect", str(tmp_path), "--role", "generator"])
    assert res.exit_code == 2 and "not a run directory" in res.output


def test_report_renders_a_real_run(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    assert _train(tiny_model_dir, out).exit_code == 0
    res = CliRunner().invoke(app, ["report", str(out)])
    assert res.exit_code == 0, res.output
    html = (out / "report.html").read_text()
    assert "<svg" in html and "generator" in html and "aggregator" in html
    res = CliRunner().invoke(app, ["report", str(tmp_path / "nope")])
    assert res.exit_code == 2 and "nope" in res.output
