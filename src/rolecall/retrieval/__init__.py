"""Retrieval for workflows that search: passages from a local corpus, ranked by BM25."""
from rolecall.retrieval.bm25 import BM25Retriever, tokenize
from rolecall.retrieval.corpus import CorpusError, Passage, load_corpus, write_corpus

__all__ = ["BM25Retriever", "CorpusError", "Passage", "load_corpus", "tokenize", "write_corpus"]
