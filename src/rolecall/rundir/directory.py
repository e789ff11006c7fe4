"""The run directory: resolved config, metrics.jsonl, samples.jsonl, checkpoints/."""
from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path

from rolecall.diagnostics.summary import SITTINGS
from rolecall.schema import Config, dump_config
from rolecall.errors import UserError
from rolecall.rundir.checkpoint import FINGERPRINT, write_durable
from rolecall.rundir.ownership import LOCK, RunDirBusy, check_new_run_dir, hold, holder, mark
from rolecall.types import Episode


def _clean(v):
    # JSON has no NaN/Inf: write null so every line stays parseable by strict readers.
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def read_lines(path: Path) -> list[tuple[str, dict]]:
    """(line, row) pairs; a torn last line (the process was killed mid-append) is dropped."""
    lines = path.read_text(errors="replace").splitlines()
    last = max((i for i, x in enumerate(lines) if x.strip()), default=-1)
    out = []
    for i, x in enumerate(lines):
        if not x.strip():
            continue
        try:
            row = json.loads(x)
        except ValueError as e:
            if i == last:
                continue
            raise RunLogDamaged(f"{path} line {i + 1} is not a JSON row ({e}); only a last line torn by a kill "
                                "is expected there. Nothing was changed; repair or remove that line, then retry") from None
        if not isinstance(row, dict) or not isinstance(row.get("step"), int):
            raise RunLogDamaged(f"{path} line {i + 1} is not a row of this run (no integer 'step'). "
                                "Nothing was changed; repair or remove that line, then retry")
        out.append((x, row))
    return out


__all__ = ["LOCK", "RunDir", "RunDirBusy", "RunLogDamaged", "hold", "holder", "read_lines"]  # the lock lives in ownership


class RunLogDamaged(UserError, ValueError):
    """metrics.jsonl or a samples file has a bad line that a kill cannot explain."""


class RunDir:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.metrics = self.path / "metrics.jsonl"
        self.samples = self.path / "samples.jsonl"
        # The same few validation problems at every validation: read one role across steps.
        self.val_samples = self.path / "val_samples.jsonl"
        self._held: contextlib.ExitStack | None = None

    def create(self, cfg: Config, *, held: bool = False) -> None:
        """Make the folder a new run's: refused (`RunDirRefused`, nothing written) unless it is empty,
        missing or rolecall's own run that logged nothing. Call it once every input has loaded, so a
        failure leaves no folder behind. Unless `held` (the caller holds the lock already), the run
        directory is held from here until `release()`."""
        check_new_run_dir(self.path, probe_lock=not held)
        self.path.mkdir(parents=True, exist_ok=True)
        if not held:
            self._held = contextlib.ExitStack()
            self._held.enter_context(hold(self.path))
            check_new_run_dir(self.path, probe_lock=False)  # another process may have started a run here in between
        mark(self.path)  # first: from here on the folder is this run's, whatever fails next
        (self.path / "config.yaml").write_text(dump_config(cfg))
        self.metrics.write_text("")
        self.samples.write_text("")
        self.val_samples.write_text("")
        (self.path / SITTINGS).unlink(missing_ok=True)  # a failed start's, when the folder is started again

    def release(self) -> None:
        """Let go of the lock `create` took (no-op otherwise)."""
        if self._held is not None:
            self._held.close()
            self._held = None

    def log(self, row: dict) -> None:
        with open(self.metrics, "a") as f:
            f.write(json.dumps({k: _clean(v) for k, v in row.items()}) + "\n")

    def rows(self) -> list[dict]:
        if not self.metrics.exists():
            return []
        return [row for _, row in read_lines(self.metrics)]

    def check_logs(self) -> list[dict]:
        """Raise `RunLogDamaged` naming the first bad line of any log, before a resume touches
        them; returns the metrics rows (read once here, not again by the caller)."""
        for f in (self.samples, self.val_samples):
            if f.exists():
                read_lines(f)
        return self.rows()

    def truncate_after(self, step: int) -> None:
        """Drop what a crashed run logged past its last checkpoint: resume rewrites it."""
        for f in (self.metrics, self.samples, self.val_samples):
            if f.exists():
                keep = "".join(x + "\n" for x, row in read_lines(f) if row["step"] <= step)
                write_durable(f, keep.encode())  # a kill while truncating must not lose the kept rows

    def write_fingerprint(self, fingerprint: dict) -> None:
        """What this run trains on (model, tokenizer, data, routing, reward); each checkpoint copies it."""
        write_durable(self.path / FINGERPRINT, json.dumps(fingerprint, indent=1, sort_keys=True).encode())

    def log_samples(self, step: int, episodes: list[Episode], n: int, *, validation: bool = False) -> None:
        with open(self.val_samples if validation else self.samples, "a") as f:
            for ep in episodes[:n]:
                f.write(json.dumps({
                    "step": step, "uid": ep.problem.uid, "problem": ep.problem.prompt, "answer": ep.problem.answer, "sample": ep.sample,
                    "final": ep.final_answer, "reward": ep.reward,
                    "info": {k: v for k, v in ep.facts().items() if isinstance(v, (str, int, float, bool, list, dict, type(None)))},
                    "turns": [{"role": t.role, "slot": t.slot, "policy": t.policy, "completion": t.completion_text,
                               "finish": t.finish_reason, "tokens": len(t.completion_ids)} for t in ep.turns],
                }, default=str) + "\n")
