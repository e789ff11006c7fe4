"""The deliberation meta-policy trained with its episodes on 2 Ray rollout actors (a local Ray
instance, CPU only, the tiny model): the random-action states, the counterfactual corpus and
every validation arm are deliberated on the actors, each share by the actor's copy of the
stage's deliberator; the network trains in this process."""
from __future__ import annotations

import json
import shutil
import tempfile

import pytest

import rolecall

ray = pytest.importorskip("ray", reason="Ray is in the test extras: pip install -e '.[test]'")


@pytest.fixture
def ray_local(monkeypatch):
    """A local Ray instance with 2 CPUs. Its `_temp_dir` is a short folder under /tmp rather than
    under tmp_path: Ray's socket paths live below it and may not exceed 107 bytes."""
    import signal

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    temp = tempfile.mkdtemp(prefix="rc-ray-", dir="/tmp")
    # ray.init installs SIGTERM/SIGINT handlers of its own and never restores them: put back the
    # process's own, or every later test that counts on the default handlers fails
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR", _temp_dir=temp)
    try:
        yield temp
    finally:
        ray.shutdown()
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        shutil.rmtree(temp, ignore_errors=True)


def test_a_meta_policy_trains_with_its_episodes_on_two_ray_actors(tiny_model_dir, tmp_path, ray_local, monkeypatch):
    from rolecall.distributed.ray_rollout import RayRollout

    played = []  # (actors, problems, settings the actors' workflows got) per rollout
    rollout = RayRollout.rollout

    def spy(self, problems, *args, **kwargs):
        played.append((self.n, len(problems), sorted(self.settings)))
        return rollout(self, problems, *args, **kwargs)

    monkeypatch.setattr(RayRollout, "rollout", spy)
    cfg = rolecall.make_config("examples/deliberation", [
        f"model.path={tiny_model_dir}", "task.n_val=4", "rollout.max_new_tokens=4", "rollout.actors=2",
        "train.threads=1", "metapolicy.sft_problems=3", "metapolicy.corpus_problems=2",
        "metapolicy.sft_epochs=2", "metapolicy.epochs=2"])
    notes: list[str] = []
    rolecall.train_run(cfg, tmp_path / "r", notify=notes.append)

    report = json.loads((tmp_path / "r" / "deliberation.json").read_text())
    # 3 problems x 3 agents x 3 rounds of labelled states; 2 x 3 x 3 corpus rows, which exist only
    # if the actors' workflows branched (counterfactual=True reached them)
    assert report["states"] == 27 and report["corpus"] == 18
    arms = report["validation"]
    assert set(arms) == {"persist", "refine", "concede", "sft", "trained", "oracle"}
    # each fixed arm's deliberator decided on the actors (their config says `persist`)
    assert arms["refine"]["round0_refine"] == 1.0 and arms["concede"]["round0_concede"] == 1.0
    # states, corpus, SoftRankPO's step-0 validation and the 6 arms: all on both actors
    assert len(played) == 9 and all(n == 2 and k >= 2 for n, k, _ in played)
    assert all(settings == ["counterfactual", "deliberator"] for _, _, settings in played)
    assert any("episodes on 2 Ray rollout actors" in n for n in notes)
    assert (tmp_path / "r" / "checkpoints" / "policy-meta" / "final.ckpt").exists()
