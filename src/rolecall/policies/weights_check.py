"""Check a checkpoint's weights files before anything loads them: headers only, no tensor data.

A truncated or garbled weights file otherwise passes every check until `from_pretrained` (or a
GGUF conversion) reads it, and then fails deep inside a library. Here each file's header is read
and every tensor is checked to end within the file, so the problem is one line naming the file:

- `.safetensors`: the 8-byte header length, the JSON header, each tensor's `data_offsets`;
- `model.safetensors.index.json` (sharded): every shard named exists, holds the tensors the index
  puts there, and is checked as above;
- `.bin` (and its index): every file exists and is non-empty; a zip-format one (what `torch.save`
  writes) has its closing directory, which a truncated copy lacks;
- `.gguf`: magic, version, the metadata, the tensor infos, and each tensor's data within the file.
"""
from __future__ import annotations

import json
import mmap
import struct
import zipfile
from pathlib import Path

from rolecall.errors import UserError

# What transformers loads from a directory, in its order of preference.
SAFETENSORS, SAFETENSORS_INDEX = "model.safetensors", "model.safetensors.index.json"
BIN, BIN_INDEX = "pytorch_model.bin", "pytorch_model.bin.index.json"
WEIGHTS_FILES = (SAFETENSORS, SAFETENSORS_INDEX, BIN, BIN_INDEX)

_ST_DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1, "U16": 2, "I16": 2,
                   "F16": 2, "BF16": 2, "U32": 4, "I32": 4, "F32": 4, "U64": 8, "I64": 8, "F64": 8, "C64": 8}
_ST_MAX_HEADER = 100 << 20  # safetensors' own limit on the JSON header


class WeightsError(UserError, ValueError):
    """A weights file is missing, empty, truncated or not what its name says; the message names it."""


def _fail(path: Path, what: str) -> WeightsError:
    return WeightsError(f"{path}: {what}")


def _size(path: Path) -> int:
    if not path.is_file():
        raise _fail(path, "missing" if not path.exists() else "not a file")
    size = path.stat().st_size
    if size == 0:
        raise _fail(path, "empty (0 bytes)")
    return size


def check_model_dir(d: Path) -> dict[str, int]:
    """Check the weights transformers would load from `d`; {"files": n, "tensors": n} checked."""
    d = Path(d)
    if (d / SAFETENSORS).exists():
        return {"files": 1, "tensors": len(check_safetensors(d / SAFETENSORS))}
    if (d / SAFETENSORS_INDEX).exists():
        return _check_index(d / SAFETENSORS_INDEX, check_safetensors)
    if (d / BIN).exists():
        check_bin(d / BIN)
        return {"files": 1, "tensors": 0}
    if (d / BIN_INDEX).exists():
        return _check_index(d / BIN_INDEX, lambda p: check_bin(p) or {})
    raise WeightsError(f"{d}: no weights file here (expected {', '.join(WEIGHTS_FILES)})")


def check_safetensors(path: Path) -> dict[str, tuple[int, int]]:
    """{tensor: (start, end)} in file bytes, after checking that every tensor lies within the file."""
    size = _size(path)
    if size < 8:
        raise _fail(path, f"truncated: {size} bytes, not even the 8-byte header length")
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if n > _ST_MAX_HEADER:
            raise _fail(path, f"not a safetensors file (its header length says {n} bytes)")
        if 8 + n > size:
            raise _fail(path, f"truncated: the header ends at byte {8 + n} but the file has {size} bytes")
        raw = f.read(n)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as e:
        raise _fail(path, f"its header is not valid JSON ({e})") from None
    if not isinstance(header, dict):
        raise _fail(path, "its header is not a JSON object")
    spans = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            start, end = (int(x) for x in info["data_offsets"])
            shape, dtype = [int(x) for x in info["shape"]], info["dtype"]
        except (KeyError, TypeError, ValueError):
            raise _fail(path, f"tensor {name!r} has no valid dtype, shape and data_offsets in the header") from None
        count = 1
        for dim in shape:
            count *= dim
        if not 0 <= start <= end or (dtype in _ST_DTYPE_BYTES and end - start != count * _ST_DTYPE_BYTES[dtype]):
            raise _fail(path, f"tensor {name!r} has data_offsets [{start}, {end}] that do not fit its "
                              f"{dtype} shape {shape}")
        if 8 + n + end > size:
            raise _fail(path, f"truncated: tensor {name!r} ends at byte {8 + n + end} but the file has {size} bytes")
        spans[name] = (8 + n + start, 8 + n + end)
    last = max((end for _, end in spans.values()), default=8 + n)
    if last != size:  # safetensors refuses a file its tensors do not exactly cover
        raise _fail(path, f"damaged: its tensors end at byte {last} but the file has {size} bytes")
    return spans


def check_bin(path: Path) -> None:
    """A PyTorch weights file exists and is non-empty; a zip-format one has its closing directory."""
    _size(path)
    with open(path, "rb") as f:
        zipped = f.read(4) == b"PK\x03\x04"
    if zipped and not zipfile.is_zipfile(path):
        raise _fail(path, "truncated or damaged: a zip-format PyTorch file without its closing directory")


def _check_index(index: Path, check) -> dict[str, int]:
    """Every shard an index names exists, passes `check`, and (safetensors) holds its tensors."""
    _size(index)
    try:
        weight_map = json.loads(index.read_text("utf-8"))["weight_map"]
        if not isinstance(weight_map, dict) or not weight_map:
            raise ValueError
    except (KeyError, TypeError, ValueError):
        raise _fail(index, "not a weights index (a JSON object with a non-empty weight_map)") from None
    shards: dict[str, list[str]] = {}
    for tensor, shard in weight_map.items():
        shards.setdefault(str(shard), []).append(tensor)
    for shard, tensors in sorted(shards.items()):
        path = index.parent / shard
        if not path.exists():
            raise _fail(path, f"missing (a shard: {index.name} puts {len(tensors)} tensors in it)")
        held = check(path)
        if held:
            lost = [t for t in tensors if t not in held]
            if lost:
                raise _fail(path, f"lacks {len(lost)} tensors {index.name} puts there (e.g. {lost[0]!r})")
    return {"files": len(shards), "tensors": len(weight_map)}


# GGUF (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md): magic, version, tensor and
# metadata counts, the metadata, the tensor infos, padding to the alignment, the tensor data.
_GGUF_SCALARS = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # value type: bytes
_GGUF_STRING, _GGUF_ARRAY, _GGUF_UINT32 = 8, 9, 4


class _Truncated(Exception):
    pass


class _Reader:
    """Little (or big) endian fields off a mapped file, raising `_Truncated` past its end."""

    def __init__(self, buf, order: str):
        self.buf, self.order, self.pos, self.size = buf, order, 0, len(buf)

    def take(self, n: int) -> int:
        if n < 0 or self.pos + n > self.size:
            raise _Truncated
        start, self.pos = self.pos, self.pos + n
        return start

    def uint(self, width: int) -> int:
        start = self.take(width)
        return int.from_bytes(self.buf[start:start + width], "little" if self.order == "<" else "big")

    def string(self) -> str:
        n = self.uint(8)
        start = self.take(n)
        return bytes(self.buf[start:start + n]).decode("utf-8", "replace")

    def skip_value(self, vtype: int) -> None:
        if vtype in _GGUF_SCALARS:
            self.take(_GGUF_SCALARS[vtype])
        elif vtype == _GGUF_STRING:
            self.take(self.uint(8))
        elif vtype == _GGUF_ARRAY:
            item, count = self.uint(4), self.uint(8)
            if item in _GGUF_SCALARS:
                self.take(count * _GGUF_SCALARS[item])
            elif item == _GGUF_STRING:
                if count * 8 > self.size - self.pos:  # each string has at least its 8-byte length
                    raise _Truncated
                for _ in range(count):
                    self.take(self.uint(8))
            else:
                raise ValueError(f"an array of unknown value type {item}")
        else:
            raise ValueError(f"unknown value type {vtype}")


def check_gguf(path: Path) -> int:
    """Check a `.gguf` file's header and that every tensor's data lies within it; the tensor count."""
    size = _size(path)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        if buf[:4] != b"GGUF":
            raise _fail(path, "not a GGUF file (it does not start with the GGUF magic)" if size >= 4 else
                        f"truncated: {size} bytes, not even the GGUF magic")
        try:
            return _check_gguf(path, buf, size)
        except _Truncated:
            raise _fail(path, f"truncated: its header runs past the end of the file ({size} bytes)") from None
        except WeightsError:
            raise
        except ValueError as e:
            raise _fail(path, f"damaged GGUF header: {e}") from None


def _check_gguf(path: Path, buf, size: int) -> int:
    r = _Reader(buf, "<")
    r.take(4)
    version = r.uint(4)
    if version & 0xFFFF == 0:  # written on a big-endian machine
        r.order, r.pos = ">", 4
        version = r.uint(4)
    if version not in (2, 3):
        raise _fail(path, f"GGUF version {version}, which rolecall does not read (2 or 3)")
    n_tensors, n_kv = r.uint(8), r.uint(8)
    alignment = 32
    if n_kv * 12 > size or n_tensors * 24 > size:  # at least a key and a type each; a name, dims, type, offset
        raise _Truncated
    for _ in range(n_kv):
        key, vtype = r.string(), r.uint(4)
        if key == "general.alignment" and vtype == _GGUF_UINT32:
            alignment = r.uint(4)
            if alignment <= 0 or alignment & (alignment - 1):
                raise ValueError(f"general.alignment {alignment} is not a power of two")
        else:
            r.skip_value(vtype)
    infos = []
    for _ in range(n_tensors):
        name, n_dims = r.string(), r.uint(4)
        if n_dims > 8:
            raise ValueError(f"tensor {name!r} claims {n_dims} dimensions")
        dims = [r.uint(8) for _ in range(n_dims)]
        infos.append((name, dims, r.uint(4), r.uint(8)))
    data_start = -(-r.pos // alignment) * alignment
    sizes = _quant_sizes()
    for name, dims, qtype, offset in infos:
        count = 1
        for dim in dims:
            count *= dim
        if sizes is not None and qtype not in sizes:
            raise ValueError(f"tensor {name!r} has unknown type {qtype}")
        block, block_bytes = sizes[qtype] if sizes is not None else (1, 0)
        end = data_start + offset + count // block * block_bytes
        if end > size:
            raise _fail(path, f"truncated: tensor {name!r} ends at byte {end} but the file has {size} bytes")
    return n_tensors


def _quant_sizes() -> dict[int, tuple[int, int]] | None:
    """{ggml type: (elements per block, bytes per block)} from the `gguf` package (None without it:
    then only each tensor's start is checked)."""
    try:
        from gguf.constants import GGML_QUANT_SIZES
    except ImportError:
        return None
    return {int(k): v for k, v in GGML_QUANT_SIZES.items()}
