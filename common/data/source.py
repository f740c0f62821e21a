"""One interface for a ranking task, whether it comes from files or from ir_datasets.

A `RankingSource` gives the four things a re-ranker needs: topics, qrels,
candidates (a first-stage run) and document text by id. `FileSource` reads
them from TREC files (`common.data.formats`); `common.data.irds.IrDatasetsSource`
reads them from an ir_datasets id. Training samplers, data modules and
evaluation code accept either. A source reads each part on first use and keeps it (`read_once`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar, runtime_checkable

from common.data.docstore import DocumentStore, Lookup
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


Part = TypeVar("Part")


def read_once(read: Callable[..., Part]) -> Callable[..., Part]:
    """A source's part (``topics()``, ``qrels()``, ...) read on the first call and kept in the instance's
    ``_<name>`` (as `functools.cached_property` keeps a value, so pickling and ``__dict__`` see it alike)."""
    attribute = f"_{read.__name__}"

    @functools.wraps(read)
    def part(self) -> Part:
        if attribute not in self.__dict__:
            self.__dict__[attribute] = read(self)
        return self.__dict__[attribute]

    return part


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

    @read_once
    def topics(self) -> Topics:
        return read_topics(self.topics_path)

    @read_once
    def qrels(self) -> Qrels:
        return read_qrels(self._require(self.qrels_path, "qrels"))

    @read_once
    def candidates(self) -> Run:
        return read_run(self._require(self.candidates_path, "candidates"))

    @read_once
    def documents(self) -> DocumentStore:
        return DocumentStore.for_collection(self._require(self.collection_path, "collection"), self.cache_dir)

    def _require(self, path, what: str):
        if path is None:
            raise ValueError(f"source {self.name!r} has no {what} file")
        return path


class InMemoryDocuments(Lookup):
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

    def documents(self) -> Iterator[Document]:
        """Every document, in insertion order."""
        return iter(self._documents.values())
