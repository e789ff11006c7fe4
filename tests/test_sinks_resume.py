"""TensorBoard and W&B follow --resume: no step twice in TensorBoard, the same W&B run id."""
from __future__ import annotations

from pathlib import Path

import pytest

from rolecall.config import load_config
from rolecall.train.launch import train

pytest.importorskip("tensorboard")
pytest.importorskip("wandb")


def _cfg(model_dir, steps):
    return load_config(None, [f"model.path={model_dir}", "rollout.problems_per_step=2", "rollout.group_size=2",
                              "task.n_val=4", "rollout.max_new_tokens=4", f"train.steps={steps}", "train.val_every=2",
                              "train.checkpoint_every=2", "train.sinks=[tensorboard, wandb]", "train.wandb_mode=offline"])


def _tb_steps(run_dir: Path, tag: str) -> list[int]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "tensorboard"))
    acc.Reload()
    return [e.step for e in acc.Scalars(tag)]


def test_a_resumed_run_continues_its_sinks(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    out = tmp_path / "r"
    # Steps 1-3 run and are logged; the checkpoint is at step 2: a crash after step 3.
    train(_cfg(tiny_model_dir, 4), out, stop_after=3, notify=lambda text: None)
    assert _tb_steps(out, "reward/mean") == [1, 2, 3]
    first_id = (out / "wandb_run_id").read_text().strip()
    train(_cfg(tiny_model_dir, 4), out, resume=True, notify=lambda text: None)
    # Step 3 ran again after the resume; TensorBoard shows it once, with the resumed value.
    assert _tb_steps(out, "reward/mean") == [1, 2, 3, 4]
    assert _tb_steps(out, "val/accuracy") == [0, 2, 4]
    assert (out / "wandb_run_id").read_text().strip() == first_id
    runs = sorted(p.name for p in (out / "wandb").glob("offline-run-*"))
    # offline-run-<time>-<id>, with "-1" added when both started within the same second
    assert len(runs) == 2 and all(f"-{first_id}" in name for name in runs)
