"""Rollout workers on a local Ray instance (2 actors): the same episodes as in-process for the
same seeds, adapters published before each rollout, a dead actor replaced and its share retried."""
from __future__ import annotations

import shutil
import tempfile

import pytest
import torch

import rolecall

ray = pytest.importorskip("ray", reason="Ray is in the test extras: pip install -e '.[test]'")


@pytest.fixture
def ray_local(monkeypatch):
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    temp = tempfile.mkdtemp(prefix="rc-ray-", dir="/tmp")  # Ray's socket paths must stay short
    yield temp
    if ray.is_initialized():
        ray.shutdown()
    shutil.rmtree(temp, ignore_errors=True)


def _cfg(model_dir, workers: int):
    return rolecall.make_config({"model": {"path": str(model_dir)}, "task": {"n_val": 4},
                                 "rollout": {"problems_per_step": 3, "group_size": 2, "max_new_tokens": 6,
                                             "request_seeds": True, "actors": workers}})


def _episodes(eps):
    return [[(t.role, t.slot, t.completion_text, t.completion_ids) for t in ep.turns] + [ep.group, ep.sample]
            for ep in eps]


def test_two_ray_workers_give_the_episodes_and_updates_of_one_process(tiny_model_dir, ray_local):
    from peft import get_peft_model_state_dict

    from rolecall.train.stack import build_stack

    from rolecall.train.step import roll_out as _rollout, train_step

    local = build_stack(_cfg(tiny_model_dir, 0))
    remote = build_stack(_cfg(tiny_model_dir, 2))  # its own Ray instance, in a short temp dir it removes
    try:
        assert len(remote.actors.actors) == 2
        row_l, eps_l = train_step(local, 1)
        row_r, eps_r = train_step(remote, 1)
        assert _episodes(eps_r) == _episodes(eps_l)
        assert row_r["reward/mean"] == row_l["reward/mean"]
        for name in local.routing.trainable:  # the same batch gives the same update
            a = get_peft_model_state_dict(local.model, adapter_name=name)
            b = get_peft_model_state_dict(remote.model, adapter_name=name)
            assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
        # step 2 samples from the updated adapters on both sides: the workers got them
        problems = local.val_P[:3]
        v_l = _rollout(local, problems, 2, local.routing.routes, seed=7)
        v_r = _rollout(remote, problems, 2, remote.routing.routes, seed=7)
        assert _episodes(v_r) == _episodes(v_l) and remote.actors.version == 1  # published twice: versions 0, 1
        # a dead actor is replaced, loaded with the current adapters, and its share retried
        ray.kill(remote.actors.actors[0])
        again = _rollout(remote, problems, 2, remote.routing.routes, seed=7)
        assert _episodes(again) == _episodes(v_l)
    finally:
        local.close()
        remote.close()


def test_a_worker_that_keeps_dying_fails_the_step_naming_it(tiny_model_dir, ray_local):
    from rolecall.distributed.ray_rollout import RayRollout, RolloutWorkerError

    pool = RayRollout(_cfg(tiny_model_dir, 1).model_dump(mode="json"), 1, retries=1, temp_dir=ray_local)
    try:
        from rolecall.tasks.arithmetic import ArithmeticTask

        pool.version = 0
        pool.states_ref = ray.put({})
        ray.get(pool.actors[0].load.remote(0, pool.states_ref))
        start = pool._start

        def doomed():  # every replacement dies at once
            actor = start()
            ray.kill(actor)
            return actor

        pool._start = doomed
        ray.kill(pool.actors[0])
        with pytest.raises(RolloutWorkerError, match="rollout worker 0 died 2 times"):
            pool.rollout(ArithmeticTask(n_val=2).validation(), 1, {"generator": "base", "aggregator": "base"}, 1.0, 1,
                         False)
    finally:
        pool.close()


def test_the_voting_ray_example_trains_a_step(tiny_model_dir, ray_local, tmp_path, monkeypatch):
    import json

    from typer.testing import CliRunner

    from rolecall.cli import app

    monkeypatch.setenv("TMPDIR", ray_local)  # the example's own Ray instance keeps its sockets short
    res = CliRunner().invoke(app, ["train", "examples/voting-ray", f"model.path={tiny_model_dir}",
                                   "rollout.problems_per_step=2", "rollout.group_size=2", "task.n_val=4",
                                   "rollout.max_new_tokens=4", "--steps", "1", "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    rows = [json.loads(x) for x in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 1]
    assert not ray.is_initialized()  # the run shut down the instance it started


def test_starting_ray_leaves_the_trainers_signal_handlers(tiny_model_dir, ray_local):
    import signal

    from rolecall.distributed.ray_rollout import RayRollout

    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    pool = RayRollout(_cfg(tiny_model_dir, 1).model_dump(mode="json"), 1, temp_dir=ray_local)
    try:
        assert {sig: signal.getsignal(sig) for sig in before} == before
    finally:
        pool.close()
