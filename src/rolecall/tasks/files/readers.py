"""Local dataset files -> a list of row dicts. No hub access and no `datasets` import.

Accepted forms (`ACCEPTED_FORMS`): a `.parquet`, `.jsonl` or `.json` file; a directory
written by `datasets.Dataset.save_to_disk` (state.json + `data-*.arrow` in Arrow IPC stream
format); a `DatasetDict.save_to_disk` directory (dataset_dict.json + one subdirectory per
split); a directory of parquet files laid out like a hub snapshot
(`data/train-00000-of-00001.parquet`, or `<config>/train/0000.parquet`).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rolecall.errors import UserError

ACCEPTED_FORMS = (
    "a .parquet file",
    "a .jsonl file (one JSON object per line)",
    "a .json file (a list of objects, or an object of equal-length column lists)",
    "a datasets save_to_disk directory (state.json + data-*.arrow)",
    "a DatasetDict save_to_disk directory (dataset_dict.json + one subdirectory per split)",
    "a directory of parquet files named <split>-*.parquet (hub snapshot layout)",
)


class DatasetError(UserError, ValueError):
    """A dataset cannot be used as given; the message names the path and what is wrong.

    `report` holds the `LoadReport` when the failure is about bad rows, else None.
    """

    def __init__(self, message: str, report: Any = None) -> None:
        super().__init__(message)
        self.report = report


def read_rows(path: str | Path, split: str = "train") -> list[dict[str, Any]]:
    """Read every row of a local dataset; `split` picks the split of a multi-split directory."""
    p = Path(path)
    if not p.exists():
        raise _unusable(p, "no such file or directory")
    if p.is_dir():
        rows = _read_dir(p, split)
    else:
        reader = _FILE_READERS.get(p.suffix.lower())
        if reader is None:
            raise _unusable(p, f"unknown file type {p.suffix or '(no suffix)'!r}")
        rows = reader(p)
    if not rows:
        raise _unusable(p, "it holds no rows")
    return rows


def _unusable(p: Path, why: str) -> DatasetError:
    forms = "\n  - ".join(ACCEPTED_FORMS)
    return DatasetError(f"{p}: cannot read a dataset here: {why}. Accepted forms:\n  - {forms}")


# --- single files -------------------------------------------------------------------------

def _pyarrow():
    # pyarrow is only needed for parquet/arrow inputs, so JSON users need not install it.
    try:
        import pyarrow
        import pyarrow.ipc
        import pyarrow.parquet  # noqa: F401  (submodules must be imported explicitly)
    except ImportError as e:
        raise ImportError(f"reading parquet/arrow datasets needs pyarrow: pip install 'rolecall[data]' "
                          f"(or pip install pyarrow) ({e})") from None
    return pyarrow


def _read_parquet(p: Path) -> list[dict[str, Any]]:
    return _pyarrow().parquet.read_table(p).to_pylist()


def _read_jsonl(p: Path) -> list[dict[str, Any]]:
    rows = []
    with p.open(encoding="utf-8-sig") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue  # blank lines (e.g. a trailing one) are not rows
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise DatasetError(f"{p}:{lineno}: line {lineno} is not valid JSON "
                                   f"({e.msg} at column {e.colno})") from None
            if not isinstance(obj, dict):
                raise DatasetError(f"{p}:{lineno}: line {lineno} must be a JSON object, got {type(obj).__name__}")
            rows.append(obj)
    return rows


def _read_json(p: Path) -> list[dict[str, Any]]:
    text = p.read_text(encoding="utf-8-sig")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        # `Dataset.to_json("x.json")` writes JSON lines by default: a second value after
        # the first object means the file is really .jsonl.
        if e.msg == "Extra data":
            return _read_jsonl(p)
        raise DatasetError(f"{p}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    if isinstance(data, list):
        bad = next((i for i, r in enumerate(data) if not isinstance(r, dict)), None)
        if bad is not None:
            raise DatasetError(f"{p}: item {bad} of the JSON list must be an object, got {type(data[bad]).__name__}")
        return data
    if isinstance(data, dict):
        return _columns_to_rows(p, data)
    raise _unusable(p, f"the JSON top level is a {type(data).__name__}")


def _columns_to_rows(p: Path, cols: dict[str, Any]) -> list[dict[str, Any]]:
    not_lists = [k for k, v in cols.items() if not isinstance(v, list)]
    if not_lists:
        raise _unusable(p, f"a JSON object must map column names to lists; {not_lists[:5]} are not lists")
    lengths = {k: len(v) for k, v in cols.items()}
    if len(set(lengths.values())) > 1:
        raise DatasetError(f"{p}: JSON columns have different lengths {lengths}")
    n = next(iter(lengths.values()), 0)
    return [{k: v[i] for k, v in cols.items()} for i in range(n)]


_FILE_READERS = {".parquet": _read_parquet, ".jsonl": _read_jsonl, ".json": _read_json}


# --- directories --------------------------------------------------------------------------

def _read_dir(p: Path, split: str) -> list[dict[str, Any]]:
    if (p / "dataset_dict.json").is_file():
        return _read_dataset_dict(p, split)
    if (p / "state.json").is_file():
        return _read_arrow_dir(p)
    return _read_parquet_dir(p, split)


def _read_dataset_dict(p: Path, split: str) -> list[dict[str, Any]]:
    try:
        splits = json.loads((p / "dataset_dict.json").read_text())["splits"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise DatasetError(f"{p / 'dataset_dict.json'}: not a DatasetDict index ({e})") from None
    if split not in splits:
        raise DatasetError(f"{p}: no split {split!r}; this DatasetDict has {splits} (choose with source_split=...)")
    return _read_arrow_dir(p / split)


def _read_arrow_dir(p: Path) -> list[dict[str, Any]]:
    """A `Dataset.save_to_disk` directory: shards listed in state.json, in that order."""
    try:
        state = json.loads((p / "state.json").read_text())
        files = [p / f["filename"] for f in state["_data_files"]]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise DatasetError(f"{p / 'state.json'}: not a datasets state file ({e})") from None
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        raise DatasetError(f"{p}: state.json lists shard files that do not exist: {missing}")
    rows: list[dict[str, Any]] = []
    for f in files:
        rows.extend(_read_arrow_file(f))
    return rows


def _read_arrow_file(f: Path) -> list[dict[str, Any]]:
    pa = _pyarrow()
    # `datasets` writes the IPC *stream* format; the random-access *file* format is tried
    # second so an .arrow written by other tools is read too.
    try:
        with pa.memory_map(str(f)) as src:
            return pa.ipc.open_stream(src).read_all().to_pylist()
    except pa.ArrowInvalid:
        try:
            with pa.memory_map(str(f)) as src:
                return pa.ipc.open_file(src).read_all().to_pylist()
        except pa.ArrowInvalid as e:
            raise DatasetError(f"{f}: not an Arrow IPC stream or file ({e})") from None


def _read_parquet_dir(p: Path, split: str) -> list[dict[str, Any]]:
    # Hidden directories (.cache/huggingface, .git) hold no data files of the dataset.
    found = sorted(f for f in p.rglob("*.parquet")
                   if not any(part.startswith(".") for part in f.relative_to(p).parts))
    if not found:
        raise _unusable(p, "the directory has no dataset_dict.json, no state.json and no .parquet files")
    chosen = [f for f in found if _is_split_file(f, split)]
    if not chosen:
        names = [str(f.relative_to(p)) for f in found[:10]]
        raise DatasetError(f"{p}: no parquet file of split {split!r} (file name starting with "
                           f"'{split}-' or a '{split}/' directory); found {names} (choose with source_split=...)")
    parents = sorted({str(f.parent.relative_to(p)) for f in chosen})
    if len(parents) > 1:
        # A snapshot root with several configs (e.g. DAPO-Math-17k-Processed's all/ en/ cn/)
        # would silently mix them; make the caller point at one config directory.
        raise DatasetError(f"{p}: split {split!r} exists in several directories {parents}; "
                           "pass the directory of one config")
    rows: list[dict[str, Any]] = []
    for f in chosen:
        rows.extend(_read_parquet(f))
    return rows


def _is_split_file(f: Path, split: str) -> bool:
    # "train-00000-of-00001.parquet", "train.parquet", or ".../train/0000.parquet" -- but not
    # "train_sft-0000.parquet", which is another split whose name merely starts with "train".
    return f.stem == split or f.name.startswith(f"{split}-") or f.parent.name == split
