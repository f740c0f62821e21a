"""Data shared by every paper package: TREC formats, a document store, task sources, BM25, samplers and their
training tables.

The formats, the document store and `FileSource` import eagerly; the modules that
pull in heavier libraries (ir_datasets, bm25s, torch) load on first use, which
keeps command lines such as ``python -m common.evaluate`` quick to start and
lets ``python -m common.data.bm25`` run without a runpy warning.
"""

import importlib

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

_LAZY = {
    "IrDatasetsSource": "common.data.irds",
    "DatasetUnavailableError": "common.data.irds",
    "UnknownDatasetError": "common.data.irds",
    "BM25Index": "common.data.bm25",
    "bm25_retrieve": "common.data.bm25",
    "build_builtin": "common.data.builtin",
    "builtin_source": "common.data.builtin",
    "LabelGroupSampler": "common.data.samplers",
    "PairwiseSampler": "common.data.samplers",
    "PointwiseSampler": "common.data.samplers",
    "SoftmaxSampler": "common.data.samplers",
    "TrainingGroup": "common.data.samplers",
    "TrainingTable": "common.data.training_table",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'common.data' has no attribute {name!r}")


__all__ = [
    "DataFormatError", "Document", "DocumentLookup", "DocumentStore", "FileSource", "Qrels", "RankingSource",
    "Run", "Topics", "iter_collection", "ranked", "read_qrels", "read_run", "read_topics", "write_collection",
    "write_qrels", "write_run", "write_topics", *_LAZY,
]  # fmt: skip
