"""Passages a retriever searches: a JSONL corpus file of `{id, title, text}`, read and checked.

Every line is one JSON object with a non-empty `text`; `id` (string or integer) and `title`
are optional (the line number and "" stand in). A bad line stops the load naming the file
and the line, since a silently dropped passage is evidence the searcher can never find.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from rolecall.errors import UserError


class CorpusError(UserError, ValueError):
    """A corpus file that cannot be read as passages; the message names the file and line."""


@dataclass(frozen=True)
class Passage:
    id: str
    title: str
    text: str

    def render(self) -> str:
        """What a role reads: the title (when there is one) and the text."""
        return f"{self.title}: {self.text}" if self.title else self.text


def load_corpus(path: str | Path) -> list[Passage]:
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"corpus {str(path)!r}: no such file (expected JSONL lines of {{id, title, text}})")
    passages: list[Passage] = []
    seen: dict[str, int] = {}
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"corpus {str(path)!r}, line {n}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise CorpusError(f"{where}: not JSON ({e.msg})") from None
            p = passage_from_row(row, default_id=str(n), where=where)
            if p.id in seen:
                raise CorpusError(f"{where}: id {p.id!r} repeats line {seen[p.id]}")
            seen[p.id] = n
            passages.append(p)
    if not passages:
        raise CorpusError(f"corpus {str(path)!r}: no passages")
    return passages


def passage_from_row(row: object, *, default_id: str, where: str) -> Passage:
    """One `{id, title, text}` object as a Passage, or a CorpusError saying what is wrong."""
    if not isinstance(row, dict):
        raise CorpusError(f"{where}: expected an object {{id, title, text}}, got {type(row).__name__}")
    text, title, pid = row.get("text"), row.get("title", ""), row.get("id", default_id)
    if not isinstance(text, str) or not text.strip():
        raise CorpusError(f"{where}: 'text' must be a non-empty string")
    if title is None:
        title = ""
    if not isinstance(title, str):
        raise CorpusError(f"{where}: 'title' must be a string, got {type(title).__name__}")
    if isinstance(pid, bool) or not isinstance(pid, (str, int)):
        raise CorpusError(f"{where}: 'id' must be a string or an integer, got {pid!r:.40}")
    return Passage(str(pid), title.strip(), text.strip())


def file_digest(path: str | Path) -> str:
    """SHA-256 of a file's bytes: what a cached index was built from."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_corpus(path: str | Path, passages: list[Passage]) -> None:
    """Write passages as JSONL, atomically (a reader never sees half a corpus)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for p in passages:
            f.write(json.dumps({"id": p.id, "title": p.title, "text": p.text}, ensure_ascii=False) + "\n")
    tmp.replace(path)
