"""BM25 over a passage list (the `bm25s` package), with the index cached on disk by the corpus.

Scoring is Lucene's BM25 (k1, b): for each distinct query term t in passage d,
idf(t) * tf / (tf + k1 * (1 - b + b * |d| / avgdl)), idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5)).
Text is lower-cased and split into word characters, English stop words dropped, for the
passages (title and text) and the query alike. Ranking is by score, ties by corpus order,
and only passages sharing a term with the query are returned, so a query of unknown words
gets no evidence rather than arbitrary passages.

The index of a corpus file is cached next to it (`<corpus>.bm25/`) with a fingerprint of
the file's SHA-256 and the scoring settings; a changed corpus or setting rebuilds it. Where
the corpus folder is read-only the cache goes to rolecall's cache folder (`$ROLECALL_CACHE`,
else `~/.cache/rolecall`) instead.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np

from rolecall.paths import cache_dir
from rolecall.retrieval.corpus import Passage, file_digest, load_corpus

TOKENIZER_VERSION = 1  # bump when `tokenize` changes: every cached index is rebuilt
_WORD = re.compile(r"\w+")
STOPWORDS = frozenset(
    "a an and are as at be been but by did do does for from had has have he her his how i if in into is it its "
    "of on or she so than that the their them then there these they this those to was we were what when where "
    "which who whom whose why will with you your".split())


def tokenize(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in STOPWORDS]


class BM25Retriever:
    """Top-k passages for a query; `await search(query, k)` from a workflow."""

    def __init__(self, passages: list[Passage], *, k1: float = 1.5, b: float = 0.75, _index=None) -> None:
        import bm25s

        if not passages:
            raise ValueError("BM25Retriever: no passages to search")
        self.passages, self.k1, self.b = list(passages), float(k1), float(b)
        if _index is None:
            _index = bm25s.BM25(k1=self.k1, b=self.b, method="lucene")
            # An empty passage would make bm25s drop a row; a placeholder keeps ids aligned.
            _index.index([tokenize(f"{p.title} {p.text}") or [""] for p in self.passages], show_progress=False)
        self._index = _index
        self._vocab = _index.vocab_dict

    @classmethod
    def from_file(cls, path: str | Path, *, k1: float = 1.5, b: float = 0.75) -> "BM25Retriever":
        """The corpus file's passages, indexed once and cached next to it (see the module docstring)."""
        import bm25s

        path = Path(path).resolve()
        passages = load_corpus(path)
        settings = {"tokenizer": TOKENIZER_VERSION, "method": "lucene", "k1": float(k1), "b": float(b),
                    "passages": len(passages)}
        stat = path.stat()
        for cache in _cache_dirs(path):
            found = _read_fingerprint(cache)
            if found and found["settings"] == settings:
                same = (found["size"], found["mtime_ns"]) == (stat.st_size, stat.st_mtime_ns) \
                    or found["sha256"] == file_digest(path)
                if same:
                    index = bm25s.BM25.load(str(cache), show_progress=False)
                    return cls(passages, k1=k1, b=b, _index=index)
        retriever = cls(passages, k1=k1, b=b)
        fingerprint = {"corpus": str(path), "sha256": file_digest(path), "size": stat.st_size,
                       "mtime_ns": stat.st_mtime_ns, "settings": settings}
        for cache in _cache_dirs(path):
            if _save(retriever._index, cache, fingerprint):
                break
        else:
            warnings.warn(f"BM25 index of {path} could not be cached (no writable cache folder); "
                          "it is rebuilt on every run", stacklevel=2)
        return retriever

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every passage for `query` (zeros where it shares no term)."""
        terms = [t for t in dict.fromkeys(tokenize(query)) if t in self._vocab]
        if not terms:
            return np.zeros(len(self.passages), dtype=np.float32)
        return np.asarray(self._index.get_scores(terms), dtype=np.float32)

    def top(self, query: str, k: int) -> list[tuple[Passage, float]]:
        s = self.scores(query)
        hits = np.flatnonzero(s > 0)
        order = hits[np.lexsort((hits, -s[hits]))][:k]  # by score, ties by corpus order
        return [(self.passages[i], float(s[i])) for i in order]

    async def search(self, query: str, k: int = 3) -> list[Passage]:
        # In-process BM25 answers in well under a millisecond per query on corpora of this
        # size, so it runs inline; a remote retriever would await its service here.
        return [p for p, _ in self.top(query, k)]


def _cache_dirs(corpus: Path) -> list[Path]:
    where = hashlib.sha256(str(corpus).encode()).hexdigest()[:16]  # one folder per corpus path
    return [corpus.with_name(corpus.name + ".bm25"), cache_dir("bm25", f"{corpus.name}-{where}")]


def _read_fingerprint(cache: Path) -> dict | None:
    try:
        found = json.loads((cache / "fingerprint.json").read_text("utf-8"))
        return found if isinstance(found, dict) and {"settings", "sha256", "size", "mtime_ns"} <= set(found) else None
    except (OSError, ValueError):
        return None


def _save(index, cache: Path, fingerprint: dict) -> bool:
    """Write the index and its fingerprint into a fresh folder, then swap it in (atomic for readers)."""
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{cache.name}.", dir=cache.parent))
    except OSError:
        return False
    try:
        index.save(str(tmp), show_progress=False)
        (tmp / "fingerprint.json").write_text(json.dumps(fingerprint, indent=2) + "\n", "utf-8")
        old = cache.with_name(f".{cache.name}.old.{os.getpid()}")
        if cache.exists():
            cache.rename(old)
        tmp.rename(cache)
        shutil.rmtree(old, ignore_errors=True)
        return True
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        return False
