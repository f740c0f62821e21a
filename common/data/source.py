"""One interface for a ranking task, whether it comes from files or from ir_datasets.

A `RankingSource` gives the four things a re-ranker needs: topics, qrels,
candidates (a first-stage run) and document text by id. A task without judgments (a query set re-ranked with
nothing to measure it against: a task of files or a rank_llm file given no qrels file) has empty qrels, ``{}``,
rather than none: everything that reads qrels reads an empty mapping alike, and what measures asks whether it is
empty (`common.training.tasks` then evaluates every query with candidates and a topic;
`common.commands.outputs.write_results` writes the run without metrics). `FileSource` reads
them from TREC files (`common.data.formats`); `common.data.irds.IrDatasetsSource`
reads them from an ir_datasets id. Training samplers, data modules and
evaluation code accept either. A source reads each part on first use and keeps it (`read_once`).

A source of training queries also gives its qrels and candidates as a `common.data.training_table.TrainingTable`
(``training_table()``), streamed from its files once into the project's cache and mapped by every process, so that
a run file of MS MARCO's 478M training candidates is never held as dicts (the samplers read the table's columns).
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
    """A ranking task stored as TREC files; any part may be absent (None) except the topics. Without a qrels file
    its qrels are empty (module docstring); training, which samples from them, still needs the file."""

    topics_path: str | os.PathLike
    qrels_path: str | os.PathLike | None = None
    candidates_path: str | os.PathLike | None = None
    collection_path: str | os.PathLike | None = None
    name: str = ""
    cache_dir: str | os.PathLike | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.name = self.name or Path(self.topics_path).stem

    def provides(self) -> set[str]:
        """Which of topics, qrels, candidates and documents the task has a file for."""
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
        """The qrels and candidates as a memory-mapped `TrainingTable`, streamed from the two files (no dict) into
        the cache once (``training/<run file>-<key>`` under `cache_dir` or the project's cache, keyed by both files'
        contents, `common.io.file_digest`, and the table's format; built by one process under a lock,
        `common.io.built_once`) and opened read-only by every process after. A changed file makes a new table; a
        copy of the same files elsewhere (staged per job) finds the table built, as the document store does
        (`common.data.docstore`)."""
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
        builder.add_candidates((entry.qid, entry.doc_id, entry.score) for _, entry in tqdm(
            iter_run(candidates), desc=f"tabling {candidates.name}", unit=" candidates"))
        try:
            return builder.table()
        except RepeatedPairError as error:  # found once the pairs are sorted; a second pass finds its line
            records = ((n, q, d) for n, q, d, _ in iter_qrels(qrels)) if error.path == str(qrels) else (
                (n, entry.qid, entry.doc_id) for n, entry in iter_run(candidates))
            seen = (n for n, qid, doc_id in records if (qid, doc_id) == (error.query_id, error.doc_id))
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
