"""Data shared by every paper package: TREC formats, a document store, task sources, BM25, samplers."""

from common.data.docstore import DocumentStore
from common.data.formats import (
    DataFormatError,
    Document,
    Qrels,
    Run,
    Topics,
    iter_collection,
    ranked,
    read_qrels,
    read_run,
    read_topics,
    write_collection,
    write_qrels,
    write_run,
    write_topics,
)
from common.data.source import DocumentLookup, FileSource, RankingSource

__all__ = [
    "DataFormatError", "Document", "DocumentLookup", "DocumentStore", "FileSource", "Qrels", "RankingSource",
    "Run", "Topics", "iter_collection", "ranked", "read_qrels", "read_run", "read_topics", "write_collection",
    "write_qrels", "write_run", "write_topics",
]
