"""One interface for a ranking task, whether it comes from files or from ir_datasets.

A `RankingSource` gives the four things a re-ranker needs: topics, qrels,
candidates (a first-stage run) and document text by id. `FileSource` reads
them from TREC files (`common.data.formats`); `common.data.irds.IrDatasetsSource`
reads them from an ir_datasets id. Training samplers, data modules and
evaluation code accept either.
"""

from __future__ import annotations

import os
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


#: A task as a config value: ``"builtin:<split>"``, ``"irds:<ir_datasets id>"``, or a mapping of
#: `FileSource` fields (``topics_path``, ``qrels_path``, ``candidates_path``, ``collection_path``, ``name``).
SourceSpec = str | dict


def source_from_spec(spec: SourceSpec) -> RankingSource:
    """The `RankingSource` a config names (see `SourceSpec`); a malformed spec raises ValueError saying why."""
    if isinstance(spec, dict):
        unknown = set(spec) - {"topics_path", "qrels_path", "candidates_path", "collection_path", "name"}
        if unknown or "topics_path" not in spec:
            raise ValueError(
                f"a file source needs topics_path and may have qrels_path, candidates_path, collection_path, "
                f"name; got {sorted(spec)}"
            )
        return FileSource(**spec)
    kind, _, value = str(spec).partition(":")
    if kind == "builtin":
        from common.data.builtin import builtin_source

        return builtin_source(value or "test")
    if kind == "irds" and value:
        from common.data.irds import IrDatasetsSource

        return IrDatasetsSource(value)
    raise ValueError(
        f"cannot read the task {spec!r}: expected 'builtin:<split>', 'irds:<ir_datasets id>' or a mapping of "
        f"file paths (topics_path, qrels_path, candidates_path, collection_path)"
    )
