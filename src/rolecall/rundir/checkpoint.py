"""Checkpoints: per-policy PEFT adapters + optimizer/scheduler/RNG/step, written atomically.

Layout: `checkpoints/step_N/<policy>/{adapter_model.safetensors, adapter_config.json}`,
`checkpoints/step_N/trainer_state.pt` and `checkpoints/step_N/checkpoint.json` (the file
list with sizes and the run's fingerprint, written last). Every file is written under a
temporary name, fsynced and renamed; the step directory is built as `.tmp-step_N-<pid>`,
fsynced and renamed into place; only then is the `latest` marker replaced. A crash at any
point leaves the previous checkpoint and marker untouched, and `latest_checkpoint` only
ever returns a complete directory. `.tmp-*` leftovers are removed by the next save or resume.

`checkpoints/best.json` names the checkpoint of the run's best validation. It is replaced
(durably) only once the step it names is in place, and retention never deletes the step it
names, so at any instant it names a complete checkpoint or is absent.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import random
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from rolecall.errors import UserError
from rolecall.fsio import TMP_PREFIX, fsync_dir, write_durable
from rolecall.policies.adapter_files import adapter_files, load_adapter, model_of

LATEST = "latest"
BEST = "best.json"
MANIFEST = "checkpoint.json"
STATE = "trainer_state.pt"
ADAPTER_FILES = ("adapter_model.safetensors", "adapter_config.json")
FINGERPRINT = "fingerprint.json"  # in the run directory; each checkpoint embeds a copy
_STEP_DIR = re.compile(r"step_(\d+)")


class CheckpointError(UserError, RuntimeError):
    """A checkpoint could not be written (e.g. the disk is full); the previous one is intact."""


def _trainer_state(step: int, optims: dict) -> bytes:
    state = {
        "step": step,
        "optim": {k: o.state_dict() for k, o in optims.items()},
        "rng": {"torch": torch.get_rng_state(), "python": random.getstate(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None},
    }
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


def _write_step(tmp: Path, step: int, model, optims: dict, adapters: tuple[str, ...], fingerprint: dict | None) -> None:
    """Build the complete step directory under its temporary name; the manifest goes last.

    The manifest lists each file's size and SHA-256, so a later truncation, bad copy or edit
    of any file is caught at resume instead of being loaded or silently skipped.
    """
    tmp.mkdir(parents=True)
    written: dict[str, bytes] = {}
    for name in adapters:
        (tmp / name).mkdir()
        for fname, data in adapter_files(model_of(model, name), name).items():
            write_durable(tmp / name / fname, data)
            written[f"{name}/{fname}"] = data
        fsync_dir(tmp / name)
    written[STATE] = _trainer_state(step, optims)
    write_durable(tmp / STATE, written[STATE])
    manifest = {"step": step, "adapters": list(adapters),
                "files": {rel: len(d) for rel, d in written.items()},
                "sha256": {rel: hashlib.sha256(d).hexdigest() for rel, d in written.items()},
                "fingerprint": fingerprint}
    write_durable(tmp / MANIFEST, json.dumps(manifest, indent=1).encode())
    fsync_dir(tmp)


def _discard(path: Path) -> None:
    """Remove a directory without ever leaving a half-deleted one under a real name."""
    if not path.exists():
        return
    if not path.name.startswith(TMP_PREFIX):
        doomed = path.with_name(f"{TMP_PREFIX}old-{path.name}-{os.getpid()}")
        os.replace(path, doomed)
        path = doomed
    shutil.rmtree(path, ignore_errors=True)


def _publish(root: Path, tmp: Path, step: int) -> Path:
    final = root / f"step_{step}"
    _discard(final)  # a re-save of a step a crashed run already wrote (its marker never got there)
    os.replace(tmp, final)
    fsync_dir(root)
    return final


def _save_error(e: OSError, step: int, path: Path) -> CheckpointError:
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return CheckpointError(f"checkpoint of step {step} not saved: the disk is full ({str(path)!r}: {e.strerror}). "
                               "The previous checkpoint is intact; free some space, then --resume.")
    return CheckpointError(f"checkpoint of step {step} not saved to {str(path)!r}: {e}. "
                           "The previous checkpoint is intact.")


def save_checkpoint(run_dir: Path, step: int, model, optims: dict, adapters: tuple[str, ...], keep_last: int,
                    best: tuple[str, float] | None = None) -> Path:
    """Save step `step` and keep the `keep_last` newest checkpoints plus the best one; `best`
    (metric, value): this step is the run's new best, marked once its directory is in place."""
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    discard_partial(run_dir)
    tmp = root / f"{TMP_PREFIX}step_{step}-{os.getpid()}"
    fp_file = Path(run_dir) / FINGERPRINT
    fingerprint = json.loads(fp_file.read_text()) if fp_file.is_file() else None
    final = None
    try:
        _write_step(tmp, step, model, optims, adapters, fingerprint)
        final = _publish(root, tmp, step)
        write_durable(root / LATEST, f"step_{step}\n".encode())  # the commit point
        fsync_dir(root)
    except BaseException as e:
        # A failed save leaves what was there before: no temp dir, no unmarked step dir.
        shutil.rmtree(tmp, ignore_errors=True)
        if final is not None:
            with contextlib.suppress(OSError):
                _discard(final)
        if isinstance(e, OSError):
            raise _save_error(e, step, root / f"step_{step}") from e
        raise
    if best is not None:  # after the commit, before retention: the old best goes only once no longer named
        try:
            mark_best(run_dir, step, *best)
        except OSError as e:
            raise CheckpointError(f"checkpoint step_{step} is saved, but checkpoints/{BEST} could not be updated "
                                  f"to name it as the best ({e}); it still names the previous best") from e
    _retain(root, keep_last)
    return final


def _step_of(path: Path) -> int | None:
    m = _STEP_DIR.fullmatch(path.name)
    return int(m.group(1)) if m and path.is_dir() else None


def _complete_steps(root: Path, checksums: bool = True) -> list[tuple[int, Path]]:
    """Complete `step_N` directories, oldest first."""
    steps = [(_step_of(p), p) for p in root.iterdir()] if root.is_dir() else []
    return sorted((s, p) for s, p in steps if s is not None and damage(p, checksums) is None)


def _retain(root: Path, keep_last: int) -> None:
    # Sizes only: retention runs at every save, and re-hashing every kept checkpoint there
    # would read them all back each time; checksums are checked where a checkpoint is used.
    best = best_mark(root.parent)
    for s, p in _complete_steps(root, checksums=False)[:-keep_last]:
        if best is None or s != best["step"]:  # the best outlives keep_last until a better one is marked
            _discard(p)


def mark_best(run_dir: Path, step: int, metric: str, value: float) -> None:
    """Name `step_N` (already complete on disk) the run's best checkpoint, in `checkpoints/best.json`."""
    root = Path(run_dir) / "checkpoints"
    write_durable(root / BEST, json.dumps({"step": step, "checkpoint": f"step_{step}", "metric": metric,
                                           "value": value}, indent=1).encode())
    fsync_dir(root)


def clear_best(run_dir: Path) -> None:
    """Remove the best marker (a resume found that the step it names is gone)."""
    root = Path(run_dir) / "checkpoints"
    if (root / BEST).exists():
        (root / BEST).unlink()
        fsync_dir(root)


def best_mark(run_dir: Path) -> dict | None:
    """`checkpoints/best.json` ({"step", "checkpoint", "metric", "value"}); None if absent or unreadable."""
    try:
        m = json.loads((Path(run_dir) / "checkpoints" / BEST).read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(m, dict) and isinstance(m.get("step"), int) and not isinstance(m["step"], bool)
    return m if ok else None


def discard_partial(run_dir: Path, newer_than: int | None = None) -> None:
    """Remove leftovers of a killed save (`.tmp-*`), and with `newer_than` the checkpoints a
    crashed run wrote past the one a resume starts from (the resumed run rewrites them)."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return
    for p in root.iterdir():
        if p.name.startswith(TMP_PREFIX):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
        elif newer_than is not None and (_step_of(p) or 0) > newer_than:
            _discard(p)


def _manifest(path: Path) -> dict | None:
    try:
        m = json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return m if isinstance(m, dict) and isinstance(m.get("files"), dict) else None


def damage(path: Path, checksums: bool = True) -> str | None:
    """What is wrong with the checkpoint directory `path`, naming the file; None when it is sound.

    Sound: every file the manifest lists is there with its size and (checkpoints written since
    checksums were added, unless `checksums` is False) its SHA-256. A directory from before
    manifests counts if it has the trainer state and every adapter's files.
    """
    if not path.is_dir():
        return "the directory is missing"
    m = _manifest(path)
    if m is None:
        if (path / MANIFEST).exists():
            return f"{MANIFEST} is unreadable or not a checkpoint manifest"
        needed = [STATE, *(f"{d.name}/{f}" for d in sorted(path.iterdir()) if d.is_dir() for f in ADAPTER_FILES)]
        if len(needed) == 1:
            return "it holds no adapter directory"
        missing = [rel for rel in needed if not (path / rel).is_file()]
        return f"{missing[0]} is missing" if missing else None
    files, sums = m["files"], m.get("sha256") or {}
    needed = [STATE, *(f"{a}/{f}" for a in m.get("adapters", []) for f in ADAPTER_FILES)]
    unlisted = [rel for rel in needed if rel not in files]
    if unlisted:
        return f"{MANIFEST} does not list {unlisted[0]}"
    for rel, size in files.items():
        f = path / rel
        if not f.is_file():
            return f"{rel} is missing"
        actual = f.stat().st_size
        if actual != size:
            how = "truncated" if actual < size else "grown"
            return f"{rel} is {actual} bytes, the manifest says {size} ({how})"
        if checksums and rel in sums and _sha256(f) != sums[rel]:
            return f"{rel} does not match its SHA-256 in the manifest (altered after the save)"
    return None


def _sha256(f: Path) -> str:
    h = hashlib.sha256()
    with open(f, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def is_complete(path: Path) -> bool:
    return damage(path) is None


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint the `latest` marker names if it is complete, else the newest complete one."""
    root = Path(run_dir) / "checkpoints"
    name = _marker(root)
    if name and is_complete(root / name):
        return root / name
    complete = _complete_steps(root)
    return complete[-1][1] if complete else None


def _marker(root: Path) -> str | None:
    try:
        name = (root / LATEST).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return name if _STEP_DIR.fullmatch(name) else None


class CheckpointDamaged(UserError, RuntimeError):
    """A checkpoint fails its manifest or cannot be read. It is evidence, never deleted or skipped
    silently: resume refuses until the user sets it aside."""


@dataclass
class ResumePoint:
    """Where a resume starts, and the damaged checkpoints in the way.

    `damaged_newer` are newer than `checkpoint` (resuming past them would rewrite steps they
    hold: refused unless set aside); `damaged_older` are reported and left where they are.
    """

    checkpoint: Path | None
    damaged_newer: list[tuple[Path, str]] = field(default_factory=list)
    damaged_older: list[tuple[Path, str]] = field(default_factory=list)

    def refusal(self, run_dir: Path) -> str:
        bad = "; ".join(f"{_rel(p, run_dir)}: {why}" for p, why in self.damaged_newer)
        fallback = f"the newest good checkpoint, {self.checkpoint.name}" if self.checkpoint else "step 0 (no good checkpoint)"
        return (f"damaged checkpoint in {str(run_dir)!r}: {bad}. Nothing was changed or deleted. "
                f"To move it aside (to checkpoints/{DAMAGED}/, with a copy of the logs) and go on from {fallback}, "
                f"run: rolecall train --resume {run_dir} --skip-damaged")


DAMAGED = "damaged"


def _rel(p: Path, run_dir: Path) -> str:
    try:
        return str(p.relative_to(run_dir))
    except ValueError:
        return str(p)


def resume_point(run_dir: Path) -> ResumePoint:
    """The checkpoint a resume starts from (the marker's if sound, else the newest sound one),
    with every damaged checkpoint found: each `step_N` directory is checked against its manifest,
    and a `latest` marker naming a directory that no longer exists counts as damage."""
    root = Path(run_dir) / "checkpoints"
    steps = sorted((s, p) for p in (root.iterdir() if root.is_dir() else []) if (s := _step_of(p)) is not None)
    found = [(s, p, damage(p)) for s, p in steps]
    sound = [(s, p) for s, p, why in found if why is None]
    name = _marker(root)
    chosen = next((p for s, p in sound if p.name == name), sound[-1][1] if sound else None)
    at = _step_of(chosen) if chosen else 0
    point = ResumePoint(chosen)
    for s, p, why in found:
        if why is not None:
            (point.damaged_newer if s > at else point.damaged_older).append((p, why))
    if name and not (root / name).exists() and int(name.removeprefix("step_")) > at:
        point.damaged_newer.append((root / name, f"the {LATEST!r} marker names {name}, which is missing"))
    return point


def set_aside(run_dir: Path, point: ResumePoint, logs: tuple[Path, ...]) -> Path:
    """Move the damaged checkpoints newer than the resume point into `checkpoints/damaged/<time>/`,
    with a copy of `logs` (metrics and samples) as they were, before the resume rewrites the
    steps after the resume point; a README there says what was wrong. Returns that folder."""
    root = Path(run_dir) / "checkpoints"
    dest = root / DAMAGED / time.strftime("%Y%m%d-%H%M%S")
    while dest.exists():
        dest = dest.with_name(dest.name + "+")
    dest.mkdir(parents=True)
    lines = [f"Set aside on {time.strftime('%Y-%m-%d %H:%M:%S')}; the run resumed from "
             f"{point.checkpoint.name if point.checkpoint else 'step 0'}.", ""]
    for p, why in point.damaged_newer:
        lines.append(f"{p.name}: {why}")
        if p.exists():
            os.replace(p, dest / p.name)
    for f in logs:
        if f.is_file():
            shutil.copy2(f, dest / f.name)
    (dest / "README.txt").write_text("\n".join(lines) + "\n")
    fsync_dir(dest)
    fsync_dir(root)
    return dest


def checkpoint_fingerprint(ckpt: Path) -> dict | None:
    """The run fingerprint the checkpoint was saved under (None: saved without one)."""
    m = _manifest(ckpt)
    return m.get("fingerprint") if m else None


def load_adapters(ckpt: Path, model, adapters: tuple[str, ...]) -> None:
    """Each policy's adapter from checkpoint `ckpt`; `CheckpointDamaged` names one that cannot be read."""
    for name in adapters:
        try:
            load_adapter(model_of(model, name), name, ckpt / name)
        except Exception as e:  # noqa: BLE001 - SafetensorError (not an OSError), a missing or foreign adapter
            raise CheckpointDamaged(f"checkpoint {str(ckpt)!r}: the adapter of policy {name!r} cannot be loaded: {e}") from None


def load_checkpoint(ckpt: Path, model, optims: dict, adapters: tuple[str, ...]) -> int:
    """Load adapters, optimizer state and RNG; a file that cannot be read raises
    `CheckpointDamaged` naming it (before any of the training state is used)."""
    load_adapters(ckpt, model, adapters)
    # weights_only: the state is tensors, numbers and tuples; a crafted file cannot run code on --resume.
    try:
        state = torch.load(ckpt / STATE, weights_only=True)
        for k, o in optims.items():
            o.load_state_dict(state["optim"][k])
        rng, step = state["rng"], int(state["step"])
    except Exception as e:  # noqa: BLE001 - unpickling errors of every kind: the file is unusable
        raise CheckpointDamaged(f"checkpoint {str(ckpt)!r}: {STATE} cannot be loaded: {type(e).__name__}: {e}") from None
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])
    if rng.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    return step


class CheckpointMissing(UserError, ValueError):
    """The run has no (complete) checkpoint of the step asked for."""


def checkpoint_of(run_dir: Path, step: int | None, best: bool = False, *, skip_damaged: bool = False,
                  notify=None) -> Path:
    """The checkpoint to export, evaluate or generate with: `step_N`, the marked best (`best`), or
    the newest one; verified against its manifest. A damaged newest checkpoint is refused, naming
    it (as a resume refuses), unless `skip_damaged`: then the newest sound one is used and
    `notify(text)` says which was skipped. Nothing is moved or deleted either way."""
    root = Path(run_dir) / "checkpoints"
    if best and step is not None:
        raise CheckpointMissing(f"--step {step} and --best each choose a checkpoint; pass one of them")
    if best:
        return best_checkpoint(run_dir)
    if step is None:
        point = resume_point(run_dir)
        if point.damaged_newer:
            bad = "; ".join(f"{_rel(p, run_dir)}: {why}" for p, why in point.damaged_newer)
            good = point.checkpoint.name if point.checkpoint else None
            way = (f"pass --skip-damaged to use the newest sound one ({good}), or choose one with --step N or --best"
                   if good else "the run has no sound checkpoint")
            if not skip_damaged:
                raise CheckpointDamaged(f"damaged checkpoint in {str(run_dir)!r}, the newest: {bad}. Nothing was used or changed; {way}")
            if good is not None and notify is not None:
                notify(f"skipping damaged {bad}; using {good}")
        if point.checkpoint is None:
            raise CheckpointMissing(f"{str(run_dir)!r} has no checkpoint yet")
        return point.checkpoint
    ckpt = root / f"step_{step}"
    if not ckpt.is_dir():
        have = sorted(p.name for p in root.glob("step_*")) if root.is_dir() else []
        raise CheckpointMissing(f"{str(run_dir)!r} has no checkpoint of step {step}; it has {have}")
    why = damage(ckpt)
    if why is not None:
        raise CheckpointDamaged(f"checkpoint {str(ckpt)!r} cannot be used: {why}")
    return ckpt


def best_checkpoint(run_dir: Path) -> Path:
    """The checkpoint `checkpoints/best.json` names, verified against its manifest; `CheckpointMissing`
    saying why when the run has none marked."""
    root = Path(run_dir) / "checkpoints"
    mark = best_mark(run_dir)
    if mark is None:
        state = "is unreadable" if (root / BEST).exists() else "is missing"
        raise CheckpointMissing(
            f"--best: {str(run_dir)!r} has no best checkpoint marked (checkpoints/{BEST} {state}): the run was "
            "never validated after a training step, or was trained by a rolecall from before the best checkpoint "
            "was kept. Choose one with --step N, or leave --best out for the latest")
    ckpt = root / f"step_{mark['step']}"
    if not ckpt.is_dir():
        raise CheckpointMissing(f"--best: checkpoints/{BEST} of {str(run_dir)!r} names step_{mark['step']}, "
                                "which is gone; choose one with --step N")
    why = damage(ckpt)
    if why is not None:
        raise CheckpointDamaged(f"--best: checkpoint {str(ckpt)!r} cannot be used: {why}")
    return ckpt
