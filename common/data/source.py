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


#: A task as a config value: ``"builtin:<split>"``, ``"irds:<ir_datasets id>"``, a mapping of
#: `FileSource` fields (`FILE_TASK_KEYS`), or of `common.data.rank_llm.RankLLMSource` fields (`RANK_LLM_KEYS`).
SourceSpec = str | dict

#: The keys of a task from TREC files; topics_path is required.
FILE_TASK_KEYS = ("topics_path", "qrels_path", "candidates_path", "collection_path", "name")
#: The keys of a task from a rank_llm candidate file (topics, candidates and text in one JSON); rank_llm_path is
#: required.
RANK_LLM_KEYS = ("rank_llm_path", "qrels_path", "name")

#: How a task is written, for ``--help`` texts and error messages.
TASK_FORMS = (
    "builtin:<split> (train, dev, test of the built-in collection); irds:<ir_datasets id>; "
    "TREC files as nested keys topics_path (qid<TAB>text), qrels_path, candidates_path (a run to re-rank), "
    "collection_path (TSV or JSONL), name, e.g. --data.train.topics_path T --data.train.qrels_path Q; "
    "or a rank_llm candidate file: rank_llm_path (JSON of queries, hits and their text), qrels_path, name"
)


class TaskSpecError(ValueError):
    """A task spec that names no task: the message is one line naming the option and what it accepts."""


def check_spec(spec: SourceSpec, option: str = "task") -> None:
    """Raise `TaskSpecError` where `spec` is malformed or names a file that does not exist.

    Checks the form only (and, for ``irds:``, the id in the registry; nothing is downloaded), so a
    command can check its tasks before it builds anything. `option` names the spec in the message
    (``data.train``).
    """
    if isinstance(spec, dict):
        keys = RANK_LLM_KEYS if "rank_llm_path" in spec else FILE_TASK_KEYS
        unknown = sorted(set(spec) - set(keys))
        if unknown:
            bad = ", ".join(f"{option}.{key}" for key in unknown)
            raise TaskSpecError(
                f"{bad}: unknown key; a task from files takes {', '.join(FILE_TASK_KEYS)} (topics_path required), "
                f"one from a rank_llm file takes {', '.join(RANK_LLM_KEYS)} (rank_llm_path required)"
            )
        required = keys[0]
        if spec.get(required) is None:
            raise TaskSpecError(f"{option}.{required}: missing; a task from files needs topics_path "
                                f"(and takes {', '.join(FILE_TASK_KEYS[1:])}), or give rank_llm_path")
        for key in keys:
            if key.endswith("_path") and spec.get(key) is not None and not Path(spec[key]).is_file():
                raise TaskSpecError(f"{option}.{key}: no such file: {spec[key]}")
        return
    kind, _, value = str(spec).partition(":")
    if kind == "builtin":
        from common.data.builtin import SPLITS

        if (value or "test") not in SPLITS:
            raise TaskSpecError(f"{option}: unknown built-in split {value!r} in {spec!r}; expected one of "
                                f"{', '.join(f'builtin:{s}' for s in SPLITS)}")
        return
    if kind == "irds" and value:
        from common.data.irds import load_dataset

        try:
            load_dataset(value)
        except ValueError as error:
            raise TaskSpecError(f"{option}: {error}") from None
        return
    raise TaskSpecError(f"{option}: cannot read the task {spec!r}; expected {TASK_FORMS}")


def source_from_spec(spec: SourceSpec) -> RankingSource:
    """The `RankingSource` a config names (see `SourceSpec`); a malformed spec raises `TaskSpecError` saying why."""
    check_spec(spec)
    if isinstance(spec, dict):
        if "rank_llm_path" in spec:
            from common.data.rank_llm import RankLLMSource

            return RankLLMSource(**spec)
        return FileSource(**spec)
    kind, _, value = str(spec).partition(":")
    if kind == "builtin":
        from common.data.builtin import builtin_source

        return builtin_source(value or "test")
    from common.data.irds import IrDatasetsSource

    return IrDatasetsSource(value)


def source_fingerprint(spec: SourceSpec, source: RankingSource) -> dict:
    """What identifies a task's data in a cache key: the spec, and each of its files' path, size and time."""
    files = {}
    for name in (*FILE_TASK_KEYS, *RANK_LLM_KEYS):
        path = getattr(source, name, None) if name.endswith("_path") else None
        if path is not None and Path(path).is_file():
            stat = os.stat(path)
            files[name] = [str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns]
    return {"spec": spec, "files": files}
