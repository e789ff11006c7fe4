"""Cells as Ray tasks: `rolecall grid GRID.yaml --ray [ADDRESS]`.

Each cell is one Ray task with its own CPU/GPU request, so a cluster runs as many cells at
once as it has room for, and a laptop's local Ray runs `cores / cpus-per-cell` at once. The
task runs the same `execute_cell` as the sequential executor and writes the same run
directory and markers, so resume, the report and failure isolation work unchanged.

What the workers need: `rolecall` (and any user workflow module) importable, and the grid
directory on storage they all see (a laptop's disk, or a shared filesystem on a cluster).
The driver's working directory, `PYTHONPATH` and run-time switches (`HF_HUB_OFFLINE`,
`WANDB_MODE`, ...) are passed to every task, so relative dataset paths and
`module:Class` workflows resolve as they do for the driver.

Progress: the driver cannot receive the trainer's callbacks from another process, so it
reads each running cell's `metrics.jsonl` as it grows and reports the new validation rows.
A worker that dies (out of memory, killed) fails its cell with the reason; the grid goes
on. Ctrl-C cancels every running task: their cells stay unfinished and `--resume` continues
them from their last checkpoint.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

from rolecall.grid import layout
from rolecall.grid.runner import CellJob, CellResult, Listener
from rolecall.grid.spec import GridError

# Switches a cell's run reads from the environment; the driver's values go to every task.
PASSED_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "WANDB_MODE", "WANDB_DIR", "MPLCONFIGDIR", "TMPDIR",
              "PYTHONPATH", "ROLECALL_SANDBOX", "OMP_NUM_THREADS")


def _run_cell_task(work: Callable[[CellJob], CellResult], job: CellJob, cwd: str, threads: int) -> CellResult:
    """The body of one Ray task (module level, so workers import it rather than unpickle code)."""
    if os.path.isdir(cwd):
        os.chdir(cwd)  # relative dataset and prompt paths resolve as for the driver
    if cwd not in sys.path:
        sys.path.insert(0, cwd)  # `module:Class` workflows next to the grid file, as for the driver
    import torch

    if not job.config.train.threads:  # 0 = "all cores": on a shared node, the cores Ray gave this task
        torch.set_num_threads(max(1, threads))
    return work(job)


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Ray retries a dead address for minutes; a host:port that refuses a TCP connection fails now."""
    hostport = address.removeprefix("ray://")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        return  # "auto" and the like: Ray resolves them itself, and fails fast when there is none
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise GridError(f"could not start or join the Ray cluster at {address!r}: nothing answers at "
                        f"{host}:{port} ({e.strerror or e}); is `ray start --head` running there?") from None


@dataclass
class _Tail:
    """New complete lines of a growing metrics.jsonl (a torn last line waits for its end)."""

    path: Path
    offset: int = 0

    def rows(self) -> list[dict]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        end = data.rfind(b"\n") + 1
        self.offset += end
        out = []
        for line in data[:end].splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict):
                out.append(row)
        return out


@dataclass
class RayExecutor:
    """Runs each cell as a Ray task. `address=None` starts a private local Ray instance
    (`local_cpus` cores, default all) and shuts it down after; an address ("auto",
    "ray://host:10001", "host:6379") joins a running cluster and leaves it running."""

    address: str | None = None
    cpus_per_cell: float = 1.0
    gpus_per_cell: float | None = None  # None: by the cell's model.device (see `_gpus`)
    local_cpus: int | None = None
    temp_dir: str | None = None  # the local instance's session directory (default: a fresh one under /tmp)
    listener: Listener | None = None
    poll_s: float = 1.0
    remote = True  # `run_grid` passes a picklable `work` (no listener) to a remote executor
    started_ray: bool = field(default=False, init=False)
    cluster_gpus: float = field(default=0.0, init=False)
    _own_temp: str | None = field(default=None, init=False)  # the session directory this executor made
    _signals: dict = field(default_factory=dict, init=False)  # the driver's handlers, put back after Ray

    def _gpus(self, job: CellJob) -> float:
        """As asked; else one GPU for a cell on `cuda`, or on `auto` when the cluster has GPUs."""
        if self.gpus_per_cell is not None:
            return self.gpus_per_cell
        device = job.config.model.device
        return 1.0 if device.startswith("cuda") or (device == "auto" and self.cluster_gpus > 0) else 0.0

    def _init(self):
        try:
            import ray
        except ImportError:
            raise GridError("--ray needs Ray: pip install 'rolecall[ray]' (or pip install 'ray>=2.40,<3')") from None
        if ray.is_initialized():
            return ray
        kw: dict = dict(include_dashboard=False, log_to_driver=False, logging_level="ERROR")
        if self.address:
            _check_reachable(self.address)
            kw["address"] = self.address
            # a cluster's workers were started elsewhere: give them the driver's switches (a local
            # instance's workers inherit the driver's environment, and keep Ray's pre-started pool)
            env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
            kw["runtime_env"] = {"env_vars": env} if env else None
        else:  # a private instance: no token set-up, its own session directory
            os.environ.setdefault("RAY_AUTH_MODE", "disabled")
            kw["num_cpus"] = self.local_cpus or os.cpu_count() or 1
            # Ray's sockets live under it and a socket path may not exceed 107 bytes: keep it short
            self._own_temp = None if self.temp_dir else tempfile.mkdtemp(prefix="rolecall-ray-")
            kw["_temp_dir"] = self.temp_dir or self._own_temp
        # ray.init installs its own SIGTERM handler (sys.exit) and never restores the old one
        self._signals = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            ray.init(**kw)
        except Exception as e:  # noqa: BLE001 - any failure to reach or start Ray is the user's to fix
            where = f"the Ray cluster at {self.address!r}" if self.address else "a local Ray instance"
            self._restore_signals()
            raise GridError(f"could not start or join {where}: {type(e).__name__}: {e}") from None
        self.started_ray = True
        return ray

    def _restore_signals(self) -> None:
        for sig, handler in self._signals.items():
            if handler is not None:
                signal.signal(sig, handler)

    def _check_fits(self, ray, jobs: Sequence[CellJob]) -> None:
        """A request no node can meet would wait for ever: refuse it now, naming the cell."""
        total = ray.cluster_resources()
        cpus, gpus = total.get("CPU", 0), total.get("GPU", 0)
        self.cluster_gpus = gpus
        for job in jobs:
            if self.cpus_per_cell > cpus or self._gpus(job) > gpus:
                raise GridError(f"cell {job.cell.name} asks Ray for {self.cpus_per_cell:g} CPU and {self._gpus(job):g} GPU, "
                                f"but the cluster has {cpus:g} CPU and {gpus:g} GPU")

    def run(self, jobs: Sequence[CellJob], work: Callable[[CellJob], CellResult]) -> Iterator[CellResult]:
        if not jobs:
            return
        ray = self._init()
        pending: dict = {}
        try:
            self._check_fits(ray, jobs)
            cwd = os.getcwd()
            task = ray.remote(max_retries=0)(_run_cell_task)  # one function; each cell sets its request
            for job in jobs:
                ref = task.options(num_cpus=self.cpus_per_cell, num_gpus=self._gpus(job)).remote(
                    work, job, cwd, int(self.cpus_per_cell))
                pending[ref] = job
            tails = {job.cell.name: _Tail(job.path / "metrics.jsonl") for job in jobs}
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1, timeout=self.poll_s)
                self._report_progress(pending.values(), tails)
                for ref in done:
                    job = pending.pop(ref)
                    yield self._result(ray, ref, job)
        finally:
            for ref in pending:  # Ctrl-C or an error here: stop the cells still running (they stay resumable)
                ray.cancel(ref, force=True)
            if self.started_ray:
                ray.shutdown()
                self.started_ray = False
                self._restore_signals()
                if self._own_temp:  # the session's logs: every cell's outcome is in its markers
                    shutil.rmtree(self._own_temp, ignore_errors=True)
                    self._own_temp = None

    def _result(self, ray, ref, job: CellJob) -> CellResult:
        try:
            return ray.get(ref)
        except Exception as e:  # noqa: BLE001 - the worker died or the task could not run: this cell fails
            cause = getattr(e, "cause", None) or e
            first_line = (str(cause).strip().splitlines() or [""])[0]
            error = f"Ray task failed: {type(cause).__name__}: {first_line}"
            layout.mark_failed(job.path, error, str(e))
            return CellResult(job.cell.name, "failed", 0.0, error)

    def _report_progress(self, running, tails: dict[str, _Tail]) -> None:
        if not self.listener:
            return
        for job in running:
            for row in tails[job.cell.name].rows():
                if "val/accuracy" in row:
                    self.listener.event(job, "val", row)
                elif row.get("event") == "alarm":
                    self.listener.event(job, "alarm", row)
