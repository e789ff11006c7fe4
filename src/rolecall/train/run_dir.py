"""The run directory: resolved config, metrics.jsonl, samples.jsonl, checkpoints/."""
from __future__ import annotations

import json
import math
from pathlib import Path

from rolecall.config import Config, dump_config
from rolecall.train.checkpoint import FINGERPRINT, write_durable
from rolecall.types import Episode


def _clean(v):
    # JSON has no NaN/Inf: write null so every line stays parseable by strict readers.
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _read_lines(path: Path) -> list[tuple[str, dict]]:
    """(line, row) pairs; a torn last line (the process was killed mid-append) is dropped."""
    lines = [x for x in path.read_text().splitlines() if x.strip()]
    out = []
    for i, x in enumerate(lines):
        try:
            out.append((x, json.loads(x)))
        except ValueError:
            if i < len(lines) - 1:
                raise
    return out


class RunDir:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.metrics = self.path / "metrics.jsonl"
        self.samples = self.path / "samples.jsonl"
        # The same few validation problems at every validation: read one role across steps.
        self.val_samples = self.path / "val_samples.jsonl"

    def create(self, cfg: Config) -> None:
        if self.metrics.exists() and self.metrics.stat().st_size > 0:
            raise FileExistsError(f"--out {str(self.path)!r} already holds a run; use --resume {self.path} "
                                  "to continue it or choose another directory")
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / "config.yaml").write_text(dump_config(cfg))
        self.metrics.write_text("")
        self.samples.write_text("")
        self.val_samples.write_text("")

    def log(self, row: dict) -> None:
        with open(self.metrics, "a") as f:
            f.write(json.dumps({k: _clean(v) for k, v in row.items()}) + "\n")

    def rows(self) -> list[dict]:
        if not self.metrics.exists():
            return []
        return [row for _, row in _read_lines(self.metrics)]

    def truncate_after(self, step: int) -> None:
        """Drop what a crashed run logged past its last checkpoint: resume rewrites it."""
        for f in (self.metrics, self.samples, self.val_samples):
            if f.exists():
                keep = "".join(x + "\n" for x, row in _read_lines(f) if row["step"] <= step)
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
                    "info": {k: v for k, v in ep.info.items() if isinstance(v, (str, int, float, bool, list, dict, type(None)))},
                    "turns": [{"role": t.role, "slot": t.slot, "policy": t.policy, "completion": t.completion_text,
                               "finish": t.finish_reason, "tokens": len(t.completion_ids)} for t in ep.turns],
                }, default=str) + "\n")
