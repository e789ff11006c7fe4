"""Optional metric sinks beside metrics.jsonl: TensorBoard event files and Weights & Biases.

metrics.jsonl is always written and is the source of truth (reports, resume); a sink only
mirrors numeric step values. Alarm events go to TensorBoard as text and to W&B as a
`alarm` log entry. Each sink imports its library only when chosen, with a clear error when
it is missing.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Protocol


class Sink(Protocol):
    def write(self, kind: str, row: dict) -> None: ...

    def close(self) -> None: ...


def _scalars(row: dict) -> dict[str, float]:
    return {k: float(v) for k, v in row.items()
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


class TensorBoardSink:
    def __init__(self, run_dir: Path) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:
            raise RuntimeError("train.sinks: 'tensorboard' needs the tensorboard package: "
                               "pip install 'rolecall[tensorboard]'") from e
        self.writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"))

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


class WandbSink:
    def __init__(self, run_dir: Path, project: str, mode: str, config: dict) -> None:
        try:
            import wandb
        except ImportError as e:
            raise RuntimeError("train.sinks: 'wandb' needs the wandb package: pip install 'rolecall[wandb]'") from e
        self.wandb = wandb
        self.run = wandb.init(project=project, mode=mode, dir=str(run_dir), name=run_dir.name, config=config,
                              settings=wandb.Settings(silent=True, console="off"))

    def write(self, kind: str, row: dict) -> None:
        if kind == "alarm":
            self.run.log({"alarm": f"{row['alarm']}: {row['message']}"}, step=int(row["step"]))
        else:
            self.run.log(_scalars(row), step=int(row["step"]))

    def close(self) -> None:
        self.run.finish()


def build_sinks(names: list[str], run_dir: Path, *, project: str = "rolecall", mode: str = "offline",
                config: dict | None = None) -> list[Sink]:
    sinks: list[Sink] = []
    for name in names:
        if name == "tensorboard":
            sinks.append(TensorBoardSink(run_dir))
        elif name == "wandb":
            os.environ.setdefault("WANDB_SILENT", "true")
            sinks.append(WandbSink(run_dir, project, mode, config or {}))
        else:
            raise ValueError(f"train.sinks: unknown sink {name!r}; allowed: tensorboard, wandb")
    return sinks
