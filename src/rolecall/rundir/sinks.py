"""Optional metric sinks beside metrics.jsonl: TensorBoard event files and Weights & Biases.

metrics.jsonl is always written and is the source of truth (reports, resume); a sink only
mirrors numeric step values. Alarm events go to TensorBoard as text and to W&B as a
`alarm` log entry. Each sink imports its library only when chosen, with a clear error when
it is missing.
"""
from __future__ import annotations

import math
import os
import secrets
from pathlib import Path
from typing import Protocol


class Sink(Protocol):
    def write(self, kind: str, row: dict) -> None: ...

    def close(self) -> None: ...


def _scalars(row: dict) -> dict[str, float]:
    return {k: float(v) for k, v in row.items()
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


class TensorBoardSink:
    """`resume_step`: a resumed run continues from that checkpoint step; events a crashed process
    logged at later steps are purged (TensorBoard's `purge_step`), so no step appears twice."""

    def __init__(self, run_dir: Path, resume_step: int | None = None) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:
            raise RuntimeError("train.sinks: 'tensorboard' needs the tensorboard package: "
                               "pip install 'rolecall[tensorboard]'") from e
        purge = None if resume_step is None else resume_step + 1
        self.writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"), purge_step=purge)

    def write(self, kind: str, row: dict) -> None:
        step = int(row["step"])
        if kind == "alarm":
            self.writer.add_text(f"alarm/{row['alarm']}", row["message"], step)
        else:
            for k, v in _scalars(row).items():
                self.writer.add_scalar(k, v, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


RUN_ID_FILE = "wandb_run_id"


class WandbSink:
    """One W&B run per run directory: its id is kept in `wandb_run_id`, and a resume continues it.
    (W&B keeps the first value logged at a step: steps a crashed process logged past the
    checkpoint keep those values there.)"""

    def __init__(self, run_dir: Path, project: str, mode: str, config: dict) -> None:
        try:
            import wandb
        except ImportError as e:
            raise RuntimeError("train.sinks: 'wandb' needs the wandb package: pip install 'rolecall[wandb]'") from e
        self.wandb = wandb
        id_file = run_dir / RUN_ID_FILE
        run_id = id_file.read_text().strip() if id_file.is_file() else secrets.token_hex(4)  # W&B's own id shape: 8 lowercase alphanumerics
        self.run = wandb.init(project=project, mode=mode, dir=str(run_dir), name=run_dir.name, config=config,
                              id=run_id, resume="allow", settings=wandb.Settings(silent=True, console="off"))
        if not id_file.is_file():
            id_file.write_text(run_id + "\n")

    def write(self, kind: str, row: dict) -> None:
        if kind == "alarm":
            self.run.log({"alarm": f"{row['alarm']}: {row['message']}"}, step=int(row["step"]))
        else:
            self.run.log(_scalars(row), step=int(row["step"]))

    def close(self) -> None:
        self.run.finish()


def build_sinks(names: list[str], run_dir: Path, *, project: str = "rolecall", mode: str = "offline",
                config: dict | None = None, resume_step: int | None = None) -> list[Sink]:
    sinks: list[Sink] = []
    for name in names:
        if name == "tensorboard":
            sinks.append(TensorBoardSink(run_dir, resume_step))
        elif name == "wandb":
            os.environ.setdefault("WANDB_SILENT", "true")
            sinks.append(WandbSink(run_dir, project, mode, config or {}))
        else:
            raise ValueError(f"train.sinks: unknown sink {name!r}; allowed: tensorboard, wandb")
    return sinks
