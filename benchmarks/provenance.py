"""What every benchmark result records about how it was made, and how results are kept.

`provenance(...)` gives the commit (and whether the tree had uncommitted changes), the model
weights' hash, the library versions, the machine (cores, processor, and the fp32 matmul rate measured in
the same run: it drifts from day to day here), the date and the exact command.
`append_result` adds a result to a file's history and never overwrites an earlier one;
`latest` picks the newest result per measure for a summary. `write_result` is for the
benchmarks whose file holds one result: the file is the newest (the summary), stamped with
its provenance, and every version written is appended to `results/history/<name>.jsonl`,
which is never rewritten.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import time
from pathlib import Path

from rolecall.rundir.sitting import git, library_versions, machine

ROOT = Path(__file__).resolve().parent.parent


def weights_sha256(model_dir: Path) -> str:
    """SHA-256 over the directory's weight files, in name order."""
    h = hashlib.sha256()
    for f in sorted(p for p in Path(model_dir).iterdir() if p.suffix in (".safetensors", ".bin")):
        with open(f, "rb") as fh:
            while block := fh.read(1 << 20):
                h.update(block)
    return h.hexdigest()


def matmul_gflops(n: int = 1024, reps: int = 5) -> float:
    """This machine's fp32 matmul rate now, GFLOP/s (an n^3 product, after a warm-up)."""
    import torch

    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    t = time.perf_counter()
    for _ in range(reps):
        a @ b
    return 2 * n ** 3 * reps / (time.perf_counter() - t) / 1e9


def provenance(model_dir: Path | None = None, *, matmul: bool = True) -> dict:
    versions = library_versions()
    # Results written by earlier runs of a session are not a change of the code that measures.
    status = git(ROOT, "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)benchmarks/results")
    return {"commit": git(ROOT, "rev-parse", "HEAD"), "dirty": bool(status) if status is not None else None,
            "model_sha256": weights_sha256(model_dir) if model_dir else None, "versions": versions,
            "machine": {**machine(), "platform": platform.platform(),
                        "matmul_gflops": round(matmul_gflops(), 1) if matmul else None},
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command": command()}


def command() -> str:
    """The command line as typed (`python -m benchmarks NAME ...`), the interpreter's path shortened
    to `python`: what a reader runs to reproduce the result."""
    return " ".join(["python", *sys.orig_argv[1:]])


def append_result(path: Path, key: str, entry: dict) -> None:
    """Add `entry` to the list `key` of the JSON file at `path` (made if absent); earlier entries stay."""
    doc = json.loads(path.read_text()) if path.exists() else {}
    doc.setdefault(key, []).append(entry)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, path)


def write_result(path: Path, doc: dict, *, model_dir: Path | str | None = "embedded", matmul: bool = False,
                 dumps=None, history: Path | None = None) -> dict:
    """Write `doc` to `path` with its provenance under "provenance" (`model_dir`: the weights the
    result was measured on, "embedded" for the embedded model, None for none), and append the
    same JSON as one line to `history/<path's stem>.jsonl` next to it (`history`: another folder,
    for tests). `dumps` formats the file (default: JSON indented by 1). Returns the stamped doc."""
    if model_dir == "embedded":
        from rolecall.policies.model import embedded_dir

        model_dir = embedded_dir()
    stamped = {**doc, "provenance": provenance(Path(model_dir) if model_dir else None, matmul=matmul)}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text((dumps or (lambda d: json.dumps(d, indent=1)))(stamped) + "\n")
    os.replace(tmp, path)
    log = (history or path.parent / "history") / f"{path.stem}.jsonl"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as fh:  # one line a result: an earlier line is never touched
        fh.write(json.dumps(stamped, sort_keys=True) + "\n")
    return stamped


def provenance_of(doc: dict) -> dict:
    """A result's provenance fields: under "provenance" (`write_result`) or at its top level."""
    return doc.get("provenance") or doc


def origin(record: dict, source: str) -> dict:
    """Where a run kept from an earlier record (its run folder gone) was first recorded: the
    record's file, commit, date, library versions and weights hash."""
    prov = provenance_of(record)
    return {"result": source, **{k: prov.get(k) for k in ("commit", "dirty", "date", "versions", "model_sha256")}}


def latest(entries: list[dict], *fields: str) -> list[dict]:
    """The newest entry for each combination of `fields` (entries are in the order they were added)."""
    out: dict[str, dict] = {}
    for e in entries:  # a missing field and an empty one (no overrides) are the same measure
        out[json.dumps([e.get(f) or None for f in fields], sort_keys=True)] = e
    return list(out.values())
