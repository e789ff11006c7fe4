"""GGUF checkpoints as plain HF directories: converted once, cached by the file's content hash.

transformers reads a `.gguf` file (`from_pretrained(dir, gguf_file=...)`, with the `gguf`
package) and de-quantizes it to fp32, but the model it returns keeps a GGUF
`quantization_config`: transformers will not save it, and trainers such as TRL's refuse to train
it although its weights are plain floats. So the converted directory is written from a fresh
model of the same config with no quantization config at all: any tool loads and trains it like
any other checkpoint.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from rolecall.errors import UserError
from rolecall.paths import cache_dir
from rolecall.policies.weights_check import WeightsError, check_gguf

SOURCE_FILE = "rolecall_source.json"  # in a converted directory: what it was made from


def models_cache() -> Path:
    """Where converted models live: `$ROLECALL_MODELS`, else `models/` in rolecall's cache folder."""
    return Path(os.environ["ROLECALL_MODELS"]) if os.environ.get("ROLECALL_MODELS") else cache_dir("models")


def sha256_of(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


@functools.lru_cache(maxsize=16)
def _digest(path: str, size: int, mtime_ns: int) -> str:
    """A file's hash, once per process and version of the file (every part of a run resolves the path)."""
    return sha256_of(Path(path))


@functools.lru_cache(maxsize=16)
def _checked(path: str, size: int, mtime_ns: int) -> int:
    """`check_gguf`, once per process and version of the file (a large vocabulary takes a moment)."""
    return check_gguf(Path(path))


def converted_dir(gguf: str | os.PathLike, *, cache: Path | None = None,
                  notify: Callable[[str], None] = lambda text: None, what: str = "model.path",
                  refresh: bool = False) -> Path:
    """The HF directory converted from `gguf`, converting it first if this content was never seen
    (or its cached conversion is damaged, or `refresh`).

    The file's header is checked first (`weights_check.check_gguf`): a missing, empty or truncated
    file is one error naming it. The cache key is the file's SHA-256, so a renamed copy reuses
    the conversion and a changed file gets its own. A conversion records each file's size and
    SHA-256 (`cache_problem` checks them), is written to a temporary folder beside the cache
    entry and renamed into place: a kill mid-way leaves no half directory that would be taken
    for a model.
    """
    src = Path(gguf).expanduser()
    if not src.is_file():
        raise FileNotFoundError(f"{what}: {str(src)!r} " + ("is not a file" if src.exists() else "does not exist"))
    st = src.stat()
    try:
        _checked(str(src.resolve()), st.st_size, st.st_mtime_ns)
    except WeightsError as e:
        raise WeightsError(f"{what}: {e}") from None
    digest = _digest(str(src.resolve()), st.st_size, st.st_mtime_ns)
    out = (cache or models_cache()) / f"gguf-{digest[:16]}"
    if (out / SOURCE_FILE).is_file() and not refresh:
        problem = cache_problem(out)
        if problem is None:
            return out
        notify(f"the cached conversion in {out} is damaged ({problem}); converting {src.name} again ...")
    else:
        notify(f"converting {src.name} to a transformers checkpoint (once; cached in {out}) ...")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        _convert(src, tmp)
        files = {f.name: {"size": f.stat().st_size, "sha256": sha256_of(f)} for f in sorted(tmp.iterdir())
                 if f.is_file()}
        (tmp / SOURCE_FILE).write_text(json.dumps({"gguf": src.name, "sha256": digest, **_versions(),
                                                   "files": files}, indent=1))
        _install(tmp, out, keep_theirs=not refresh)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    notify(f"converted: {out}")
    return out


class DamagedCache(UserError, ValueError):
    """A cached conversion no longer matches the record of its files made when it was converted."""


def cache_problem(d: Path, *, hashes: bool = False) -> str | None:
    """What is wrong with the converted directory `d` (None: nothing): every file its conversion
    recorded is there with its size and, with `hashes`, its SHA-256 (a few seconds for 500 MB).
    A directory converted before rolecall kept that record passes unless `hashes` is asked for."""
    source = d / SOURCE_FILE
    if not d.is_dir():
        return "it is not there"
    if not source.is_file():
        return f"no {SOURCE_FILE}: an incomplete conversion"
    try:
        files = json.loads(source.read_text("utf-8")).get("files")
    except (OSError, ValueError, AttributeError):
        return f"{SOURCE_FILE} is unreadable"
    if files is None:
        return f"{SOURCE_FILE} has no record of its files (converted by an older rolecall)" if hashes else None
    try:
        for name, rec in sorted(files.items()):
            f = d / name
            if not f.is_file():
                return f"{name} is missing"
            size = f.stat().st_size
            if size != rec["size"]:
                return f"{name} has {size} bytes, {rec['size']} when converted"
            if hashes and sha256_of(f) != rec["sha256"]:
                return f"{name} does not have the SHA-256 it had when converted"
    except (AttributeError, KeyError, TypeError):
        return f"{SOURCE_FILE} is unreadable"
    return None


def _install(tmp: Path, out: Path, keep_theirs: bool) -> None:
    """Rename the finished conversion `tmp` to `out`; an older `out` is moved aside and deleted
    (unless `keep_theirs` and it is intact: another process converted the same file meanwhile)."""
    try:
        os.replace(tmp, out)  # `out` absent (or an empty folder)
        return
    except OSError:
        if keep_theirs and cache_problem(out) is None:
            return
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}-old-", dir=out.parent))
    try:
        with contextlib.suppress(FileNotFoundError):
            os.replace(out, old)  # onto an empty folder: allowed
        os.replace(tmp, out)
    finally:
        shutil.rmtree(old, ignore_errors=True)


def _versions() -> dict:
    import importlib.metadata as md

    return {name: md.version(name) for name in ("torch", "transformers", "gguf")}


def _convert(src: Path, out: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    try:
        import gguf  # noqa: F401  (transformers needs it to read the file; say so before it does)
    except ImportError:
        raise ImportError("model.path: reading a .gguf file needs the `gguf` package: "
                          "pip install 'rolecall[gguf]'") from None
    kw = {"gguf_file": src.name, "local_files_only": True}
    tok = AutoTokenizer.from_pretrained(src.parent, **kw)
    loaded = AutoModelForCausalLM.from_pretrained(src.parent, dtype=torch.float32, **kw)
    config = AutoConfig.for_model(**{k: v for k, v in loaded.config.to_dict().items() if k != "quantization_config"})
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(loaded.state_dict(), strict=False)
    # A tied head is absent from the state dict by design; anything else missing is a real loss.
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise ValueError(f"model.path: converting {src.name} lost weights: missing {missing[:5]}, "
                         f"unexpected {unexpected[:5]}")
    plain.generation_config = loaded.generation_config
    plain.save_pretrained(out)
    tok.save_pretrained(out)
