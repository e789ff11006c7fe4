"""The small objects a trainer's loop leans on, so the loop itself reads as stages:

- `Launch`: what every trainer is started with (resume switches, callbacks, the stop request,
  the data-parallel process group);
- `Ranks`: what differs between rank 0 and the other ranks of a data-parallel run (who writes,
  who decides, and the collectives that keep every rank at the same step);
- `Deadline`: `train.max_minutes`, decided alike on every rank;
- `RunLog`: every metrics row to metrics.jsonl, the extra sinks, the caller's `on_event` and the
  alarm monitor, on rank 0 only.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rolecall.diagnostics.alarms import AlarmMonitor, AlarmThresholds
from rolecall.diagnostics.summary import write_summary
from rolecall.distributed.data_parallel import DataParallel
from rolecall.errors import UserError
from rolecall.policies.routing import BASE_POLICY, Routing
from rolecall.rundir.directory import RunDir
from rolecall.rundir.sinks import build_sinks
from rolecall.rundir.stop import StopRequest
from rolecall.schema import Config

Emit = Callable[[str, dict], None]


@dataclass
class Launch:
    """How a trainer was started: the CLI's and the Python API's switches, and what stops it."""

    resume: bool
    force: bool
    skip_damaged: bool
    on_event: Emit | None
    stop_after: int | None
    notify: Callable[[str], None]
    stop: StopRequest
    dp: DataParallel | None = None


class PeerFailed(UserError, RuntimeError):
    """Another rank of a data-parallel run failed; the message is its error."""


class Ranks:
    """Rank 0 (`lead`) decides and writes; every rank computes. Without a process group this is
    one process that is its own lead, and every method is a plain call."""

    def __init__(self, dp: DataParallel | None) -> None:
        self.dp = dp
        self.lead = dp is None or dp.lead

    def on_lead(self, work: Callable[[], Any]) -> Any:
        """`work()` on rank 0 only; its result, or its error, on every rank (so no rank waits
        forever in a collective for a rank that has failed)."""
        if self.dp is None:
            return work()
        failed, result = None, None
        if self.dp.lead:
            try:
                result = work()
            except BaseException as e:  # noqa: BLE001 - re-raised below, after the others are told
                failed = e
        told = self.dp.broadcast(("error", f"{type(failed).__name__}: {failed}") if failed is not None else ("ok", result))
        if failed is not None:
            raise failed
        if told[0] == "error":
            raise PeerFailed(f"rank 0 failed: {told[1]}")
        return told[1]

    def any(self, flag: bool) -> bool:
        """True on every rank when it is true on any (a stop, a deadline: all ranks stop at one step)."""
        return self.dp.any_true(flag) if self.dp is not None else flag


class Deadline:
    """`train.max_minutes` of this process; None never passes and costs no collective."""

    def __init__(self, minutes: float | None, ranks: Ranks, start: float) -> None:
        self.minutes, self.ranks, self.start = minutes, ranks, start

    def passed(self) -> bool:
        if self.minutes is None:  # the same config on every rank: no collective needed
            return False
        return self.ranks.any(time.time() - self.start >= self.minutes * 60)


class RunLog:
    """Where a trainer's rows go. Only rank 0 writes; the other ranks' rows are dropped."""

    def __init__(self, run: RunDir, ranks: Ranks, on_event: Emit | None, start: float) -> None:
        self.run, self.ranks, self.on_event, self.start = run, ranks, on_event, start
        self.sinks: list = []
        self.monitor: AlarmMonitor | None = None

    def open(self, cfg: Config, routing: Routing, start_step: int, resume: bool) -> None:
        """The sinks and the alarm monitor, once the resume point is known: TensorBoard hides what
        a crashed process logged past it, W&B continues the same run id, and the monitor replays
        the rows the run keeps."""
        if not self.ranks.lead:
            return
        self.sinks = build_sinks(cfg.train.sinks, self.run.path, project=cfg.train.wandb_project,
                                 mode=cfg.train.wandb_mode, config=cfg.model_dump(mode="json"),
                                 resume_step=start_step if resume else None)
        if cfg.alarms.enabled and cfg.train.diagnostics == "full":
            self.monitor = build_monitor(cfg, routing)
            self.monitor.restore(self.run.rows())

    def emit(self, kind: str, row: dict) -> None:
        if not self.ranks.lead:
            return
        row["time/elapsed_s"] = round(time.time() - self.start, 2)  # wall clock of this process, for curves
        self.run.log(row)
        for sink in self.sinks:
            sink.write(kind, row)
        if self.on_event:
            self.on_event(kind, row)
        if self.monitor is not None and kind != "alarm":
            for event in self.monitor.observe(row):
                self.emit("alarm", event)

    def phase(self, step: int, stage: str) -> None:
        """Tell `on_event` what the run is doing now ("phase": e.g. validating), for a progress bar;
        not a metrics row, so nothing is written."""
        if self.ranks.lead and self.on_event:
            self.on_event("phase", {"step": step, "stage": stage})

    def note(self, step: int, event: str, **fields) -> None:
        """An event row in metrics.jsonl only (e.g. why the run stopped, read by summary.json); the
        sinks and `on_event` take metric rows, so they never see it."""
        if self.ranks.lead:
            self.run.log({"step": step, "event": event, **fields})

    def samples(self, step: int, episodes: list, n: int, validation: bool = False) -> None:
        if self.ranks.lead:
            self.run.log_samples(step, episodes, n, validation=validation)

    def close(self, notify: Callable[[str], None]) -> None:
        """Flush the sinks; on rank 0 write summary.json from what was logged (a halted run too)."""
        for sink in self.sinks:
            sink.close()
        if self.ranks.lead:
            summarize(self.run, notify)


def summarize(run: RunDir, notify: Callable[[str], None]) -> None:
    """summary.json from what the run logged so far (also for a halted or failed run); a
    failure here is reported, never raised over the error that ended the run."""
    if not run.metrics.exists() or run.metrics.stat().st_size == 0:
        return  # nothing logged yet (the run failed while loading)
    try:
        write_summary(run.path)
    except Exception as e:  # noqa: BLE001 - never mask the error that ended the run
        notify(f"summary.json not written: {e}")


def build_monitor(cfg: Config, routing: Routing) -> AlarmMonitor:
    roles_by_policy: dict[str, list[str]] = {}
    for role, policy in routing.routes.items():
        if policy != BASE_POLICY:  # the frozen base is not a policy that can drift
            roles_by_policy.setdefault(policy, []).append(role)
    a = cfg.alarms
    return AlarmMonitor(roles_by_policy, AlarmThresholds(
        window=a.window, amp_ratio=a.amp_ratio, flat_ratio=a.flat_ratio, capture_closing=a.capture_closing,
        capture_move=a.capture_move, cliff_margin=a.cliff_margin, cliff_z=a.cliff_z))
