"""One interface for a ranking task, whether it comes from files or from ir_datasets.

A `RankingSource` gives the four things a re-ranker needs: topics, qrels,
candidates (a first-stage run) and document text by id. `FileSource` reads
them from TREC files (`common.data.formats`); `common.data.irds.IrDatasetsSource`
reads them from an ir_datasets id. Training samplers, data modules and
evaluation code accept either.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Protocol, runtime_checkable

from common.data.docstore import DocumentStore
from common.data.formats import Document, Qrels, Run, Topics, read_qrels, read_run, read_topics


@runtime_checkable
class DocumentLookup(Protocol):
    def __getitem__(self, doc_id: str) -> Document: ...

    def __contains__(self, doc_id: object) -> bool: ...

    def get_many(self, doc_ids: list[str]) -> list[Document]: ...


@runtime_checkable
class RankingSource(Protocol):
    name: str

    def topics(self) -> Topics: ...

    def qrels(self) -> Qrels: ...

    def candidates(self) -> Run: ...

    def documents(self) -> DocumentLookup: ...


@dataclass
class FileSource:
    """A ranking task stored as TREC files; any part may be absent (None) except the topics."""

    topics_path: str | os.PathLike
    qrels_path: str | os.PathLike | None = None
    candidates_path: str | os.PathLike | None = None
    collection_path: str | os.PathLike | None = None
    name: str = ""
    cache_dir: str | os.PathLike | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.name = self.name or Path(self.topics_path).stem

    def topics(self) -> Topics:
        return self._topics

    def qrels(self) -> Qrels:
        return self._qrels

    def candidates(self) -> Run:
        return self._candidates

    def documents(self) -> DocumentStore:
        return self._documents

    @cached_property
    def _topics(self) -> Topics:
        return read_topics(self.topics_path)

    @cached_property
    def _qrels(self) -> Qrels:
        return read_qrels(self._require(self.qrels_path, "qrels"))

    @cached_property
    def _candidates(self) -> Run:
        return read_run(self._require(self.candidates_path, "candidates"))

    @cached_property
    def _documents(self) -> DocumentStore:
        return DocumentStore.for_collection(self._require(self.collection_path, "collection"), self.cache_dir)

    def _require(self, path, what: str):
        if path is None:
            raise ValueError(f"source {self.name!r} has no {what} file")
        return path


class InMemoryDocuments:
    """A `DocumentLookup` over a dict ``doc_id -> Document``, iterable over its ids in insertion order.

    For collections small enough to hold (a rank_llm candidate file); `origin` names where they came
    from in the KeyError of a missing id.
    """

    def __init__(self, documents: dict[str, Document], origin: str = "memory"):
        self._documents, self.origin = documents, origin

    def __getitem__(self, doc_id: str) -> Document:
        try:
            return self._documents[doc_id]
        except KeyError:
            raise KeyError(f"document {doc_id!r} is not in {self.origin}") from None

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._documents

    def __iter__(self) -> Iterator[str]:
        return iter(self._documents)

    def __len__(self) -> int:
        return len(self._documents)

    def get_many(self, doc_ids: list[str]) -> list[Document]:
        return [self[doc_id] for doc_id in doc_ids]

    def documents(self) -> Iterator[Document]:
        """Every document, in insertion order."""
        return iter(self._documents.values())
