"""One interface for a ranking task (`RankingSource`: topics, qrels, candidates and documents, each read once,
`read_once`), from TREC files (`FileSource`) or ir_datasets (`common.data.irds.IrDatasetsSource`). A task without
judgments has empty qrels; a training task also gives a memory-mapped `TrainingTable` (``training_table()``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar, runtime_checkable

from tqdm.auto import tqdm

from common.data.docstore import DocumentStore, Lookup
from common.data.formats import (DataFormatError, Document, Qrels, Run, Topics, iter_qrels, iter_run, read_qrels,
                                 read_run, read_topics)
from common.data.training_table import FORMAT as TABLE_FORMAT
from common.data.training_table import RepeatedPairError, TableBuilder, TrainingTable
from common.io import cache_root, file_digest


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
    """A source's part read on the first call and kept in the instance's ``_<name>``."""
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

    def provides(self) -> set[str]:
        paths = {"topics": self.topics_path, "qrels": self.qrels_path, "candidates": self.candidates_path,
                 "documents": self.collection_path}
        return {part for part, path in paths.items() if path is not None}

    @read_once
    def topics(self) -> Topics:
        return read_topics(self.topics_path)

    @read_once
    def qrels(self) -> Qrels:
        return {} if self.qrels_path is None else read_qrels(self.qrels_path)

    @read_once
    def candidates(self) -> Run:
        return read_run(self._require(self.candidates_path, "candidates"))

    @read_once
    def documents(self) -> DocumentStore:
        return DocumentStore.for_collection(self._require(self.collection_path, "collection"), self.cache_dir)

    def training_table(self) -> TrainingTable:
        """The qrels and candidates as a `TrainingTable`, streamed once into the cache, keyed by the files' contents."""
        files = {what: self._file(path, what) for what, path in (("qrels", self.qrels_path),
                                                                 ("candidates", self.candidates_path))}
        digests = {what: file_digest(path) for what, path in files.items()}
        key = hashlib.sha256(json.dumps([digests, TABLE_FORMAT]).encode()).hexdigest()[:16]
        folder = Path(self.cache_dir or cache_root()) / "training" / f"{files['candidates'].name}-{key}"
        made_of = {what: {"path": str(path), "sha256": digests[what]} for what, path in files.items()}
        return TrainingTable.saved(folder, lambda: self._stream_table(**files), {"files": made_of})

    def _stream_table(self, qrels: Path, candidates: Path) -> TrainingTable:
        """The table of the two files, read line by line (a repeated pair is refused naming its line)."""
        builder = TableBuilder(str(qrels), str(candidates))
        builder.add_qrels((qid, doc_id, label) for _, qid, doc_id, label in tqdm(
            iter_qrels(qrels), desc=f"tabling {qrels.name}", unit=" judgments"))
        builder.add_candidates((qid, doc_id, score) for _, qid, doc_id, score in tqdm(
            iter_run(candidates), desc=f"tabling {candidates.name}", unit=" candidates"))
        try:
            return builder.table()
        except RepeatedPairError as error:
            records = iter_qrels(qrels) if error.path == str(qrels) else iter_run(candidates)
            seen = (n for n, qid, doc_id, _ in records if (qid, doc_id) == (error.query_id, error.doc_id))
            next(seen)
            raise DataFormatError(error.path, next(seen), error.reason) from None

    def _file(self, path, what: str) -> Path:
        path = Path(self._require(path, what)).resolve()
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such file")
        return path

    def _require(self, path, what: str):
        if path is None:
            raise ValueError(f"source {self.name!r} has no {what} file")
        return path


class InMemoryDocuments(Lookup):
    """A `DocumentLookup` over a dict ``doc_id -> Document``, iterable over its ids in insertion order."""

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
        return iter(self._documents.values())
