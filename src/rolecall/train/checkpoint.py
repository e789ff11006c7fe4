"""Checkpoints: per-policy PEFT adapters + optimizer/scheduler/RNG/step, written atomically.

Layout: `checkpoints/step_N/<policy>/{adapter_model.safetensors, adapter_config.json}`,
`checkpoints/step_N/trainer_state.pt` and `checkpoints/step_N/checkpoint.json` (the file
list with sizes and the run's fingerprint, written last). Every file is written under a
temporary name, fsynced and renamed; the step directory is built as `.tmp-step_N-<pid>`,
fsynced and renamed into place; only then is the `latest` marker replaced. A crash at any
point leaves the previous checkpoint and marker untouched, and `latest_checkpoint` only
ever returns a complete directory. `.tmp-*` leftovers are removed by the next save or resume.
"""
from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import random
import re
import shutil
from pathlib import Path

import torch

_TMP = ".tmp-"
LATEST = "latest"
MANIFEST = "checkpoint.json"
STATE = "trainer_state.pt"
ADAPTER_FILES = ("adapter_model.safetensors", "adapter_config.json")
FINGERPRINT = "fingerprint.json"  # in the run directory; each checkpoint embeds a copy
_STEP_DIR = re.compile(r"step_(\d+)")


class CheckpointError(RuntimeError):
    """A checkpoint could not be written (e.g. the disk is full); the previous one is intact."""


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durable(path: Path, data: bytes) -> None:
    """Write `path` so that a crash leaves the old file or the whole new one, never a prefix.

    The caller fsyncs `path.parent` once all its files are in (one directory sync, not one per file).
    """
    tmp = path.with_name(f"{_TMP}{path.name}-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    os.replace(tmp, path)


def _adapter_files(model, name: str) -> dict[str, bytes]:
    from peft import get_peft_model_state_dict
    from safetensors.torch import save

    state = {k: v.detach().cpu().contiguous() for k, v in get_peft_model_state_dict(model, adapter_name=name).items()}
    # What peft's PeftConfig.save_pretrained writes, as bytes we can write durably.
    config = {k: sorted(v) if isinstance(v, set) else v for k, v in model.peft_config[name].to_dict().items()}
    return {"adapter_model.safetensors": save(state),
            "adapter_config.json": json.dumps(config, indent=2, sort_keys=True).encode()}


def save_adapter(model, name: str, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for fname, data in _adapter_files(model, name).items():
        write_durable(out / fname, data)
    _fsync_dir(out)


def load_adapter(model, name: str, src: Path) -> None:
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    f = src / "adapter_model.safetensors"
    if not f.is_file():
        raise FileNotFoundError(f"checkpoint {str(src)!r} has no adapter for policy {name!r}")
    result = set_peft_model_state_dict(model, load_file(str(f)), adapter_name=name)
    unexpected = getattr(result, "unexpected_keys", [])
    if unexpected:
        raise ValueError(f"adapter {name!r} in {str(src)!r} does not fit this model: {unexpected[:3]} ...")


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
    """Build the complete step directory under its temporary name; the manifest goes last."""
    tmp.mkdir(parents=True)
    sizes: dict[str, int] = {}
    for name in adapters:
        save_adapter(model, name, tmp / name)
        sizes.update({f"{name}/{f}": (tmp / name / f).stat().st_size for f in ADAPTER_FILES})
    write_durable(tmp / STATE, _trainer_state(step, optims))
    sizes[STATE] = (tmp / STATE).stat().st_size
    manifest = {"step": step, "adapters": list(adapters), "files": sizes, "fingerprint": fingerprint}
    write_durable(tmp / MANIFEST, json.dumps(manifest, indent=1).encode())
    _fsync_dir(tmp)


def _discard(path: Path) -> None:
    """Remove a directory without ever leaving a half-deleted one under a real name."""
    if not path.exists():
        return
    if not path.name.startswith(_TMP):
        doomed = path.with_name(f"{_TMP}old-{path.name}-{os.getpid()}")
        os.replace(path, doomed)
        path = doomed
    shutil.rmtree(path, ignore_errors=True)


def _publish(root: Path, tmp: Path, step: int) -> Path:
    final = root / f"step_{step}"
    _discard(final)  # a re-save of a step a crashed run already wrote (its marker never got there)
    os.replace(tmp, final)
    _fsync_dir(root)
    return final


def _save_error(e: OSError, step: int, path: Path) -> CheckpointError:
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return CheckpointError(f"checkpoint of step {step} not saved: the disk is full ({str(path)!r}: {e.strerror}). "
                               "The previous checkpoint is intact; free some space, then --resume.")
    return CheckpointError(f"checkpoint of step {step} not saved to {str(path)!r}: {e}. "
                           "The previous checkpoint is intact.")


def save_checkpoint(run_dir: Path, step: int, model, optims: dict, adapters: tuple[str, ...], keep_last: int) -> Path:
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    discard_partial(run_dir)
    tmp = root / f"{_TMP}step_{step}-{os.getpid()}"
    fp_file = Path(run_dir) / FINGERPRINT
    fingerprint = json.loads(fp_file.read_text()) if fp_file.is_file() else None
    final = None
    try:
        _write_step(tmp, step, model, optims, adapters, fingerprint)
        final = _publish(root, tmp, step)
        write_durable(root / LATEST, f"step_{step}\n".encode())  # the commit point
        _fsync_dir(root)
    except BaseException as e:
        # A failed save leaves what was there before: no temp dir, no unmarked step dir.
        shutil.rmtree(tmp, ignore_errors=True)
        if final is not None:
            with contextlib.suppress(OSError):
                _discard(final)
        if isinstance(e, OSError):
            raise _save_error(e, step, root / f"step_{step}") from e
        raise
    _retain(root, keep_last)
    return final


def _step_of(path: Path) -> int | None:
    m = _STEP_DIR.fullmatch(path.name)
    return int(m.group(1)) if m and path.is_dir() else None


def _complete_steps(root: Path) -> list[tuple[int, Path]]:
    """Complete `step_N` directories, oldest first."""
    steps = [(_step_of(p), p) for p in root.iterdir()] if root.is_dir() else []
    return sorted((s, p) for s, p in steps if s is not None and is_complete(p))


def _retain(root: Path, keep_last: int) -> None:
    for _, p in _complete_steps(root)[:-keep_last]:
        _discard(p)


def discard_partial(run_dir: Path, newer_than: int | None = None) -> None:
    """Remove leftovers of a killed save (`.tmp-*`), and with `newer_than` the checkpoints a
    crashed run wrote past the one a resume starts from (the resumed run rewrites them)."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return
    for p in root.iterdir():
        if p.name.startswith(_TMP):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
        elif newer_than is not None and (_step_of(p) or 0) > newer_than:
            _discard(p)


def _manifest(path: Path) -> dict | None:
    try:
        m = json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return m if isinstance(m, dict) and isinstance(m.get("files"), dict) else None


def is_complete(path: Path) -> bool:
    """Every file the manifest lists is there with its size (trainer state and each adapter).

    A directory from before manifests counts if it has the trainer state and every adapter's files.
    """
    if not (path / STATE).is_file():
        return False
    m = _manifest(path)
    if m is None:
        if (path / MANIFEST).exists():
            return False  # a manifest that does not parse is a damaged checkpoint
        adapters = [d for d in path.iterdir() if d.is_dir()]
        return bool(adapters) and all((d / f).is_file() for d in adapters for f in ADAPTER_FILES)
    needed = {STATE, *(f"{a}/{f}" for a in m.get("adapters", []) for f in ADAPTER_FILES)}
    files = m["files"]
    if not needed <= files.keys():
        return False
    try:
        return all((path / rel).stat().st_size == size for rel, size in files.items())
    except OSError:
        return False


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint the `latest` marker names if it is complete, else the newest complete one."""
    root = Path(run_dir) / "checkpoints"
    try:
        name = (root / LATEST).read_text().strip()
    except (OSError, UnicodeDecodeError):
        name = ""
    if _STEP_DIR.fullmatch(name) and is_complete(root / name):
        return root / name
    complete = _complete_steps(root)
    return complete[-1][1] if complete else None


def checkpoint_fingerprint(ckpt: Path) -> dict | None:
    """The run fingerprint the checkpoint was saved under (None: saved without one)."""
    m = _manifest(ckpt)
    return m.get("fingerprint") if m else None


def load_checkpoint(ckpt: Path, model, optims: dict, adapters: tuple[str, ...]) -> int:
    for name in adapters:
        load_adapter(model, name, ckpt / name)
    # weights_only: the state is tensors, numbers and tuples; a crafted file cannot run code on --resume.
    state = torch.load(ckpt / STATE, weights_only=True)
    for k, o in optims.items():
        o.load_state_dict(state["optim"][k])
    torch.set_rng_state(state["rng"]["torch"])
    random.setstate(state["rng"]["python"])
    if state["rng"].get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["rng"]["cuda"])
    return int(state["step"])
