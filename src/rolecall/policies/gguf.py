"""GGUF checkpoints as plain HF directories: converted once, cached by the file's content hash.

transformers reads a `.gguf` file (`from_pretrained(dir, gguf_file=...)`, with the `gguf`
package) and de-quantizes it to fp32, but the model it returns keeps a GGUF
`quantization_config`: transformers will not save it, and trainers such as TRL's refuse to train
it although its weights are plain floats. So the converted directory is written from a fresh
model of the same config with no quantization config at all: any tool loads and trains it like
any other checkpoint.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from rolecall.paths import cache_dir

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


def converted_dir(gguf: str | os.PathLike, *, cache: Path | None = None,
                  notify: Callable[[str], None] = lambda text: None) -> Path:
    """The HF directory converted from `gguf`, converting it first if this content was never seen.

    The cache key is the file's SHA-256, so a renamed copy reuses the conversion and a changed
    file gets its own. A conversion is written to a temporary folder and renamed into place:
    a kill mid-way leaves no half directory that would be taken for a model.
    """
    src = Path(gguf).expanduser()
    if not src.is_file():
        raise FileNotFoundError(f"model.path: {str(src)!r} is not a file")
    st = src.stat()
    digest = _digest(str(src.resolve()), st.st_size, st.st_mtime_ns)
    out = (cache or models_cache()) / f"gguf-{digest[:16]}"
    if (out / SOURCE_FILE).is_file():
        return out
    notify(f"converting {src.name} to a transformers checkpoint (once; cached in {out}) ...")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        _convert(src, tmp)
        (tmp / SOURCE_FILE).write_text(json.dumps({"gguf": src.name, "sha256": digest, **_versions()}, indent=1))
        try:
            os.replace(tmp, out)
        except OSError:  # another process converted the same file meanwhile: keep its copy
            if not (out / SOURCE_FILE).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    notify(f"converted: {out}")
    return out


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
