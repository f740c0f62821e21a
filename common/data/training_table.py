"""A training task's qrels and candidates as memory-mapped columns (a CSR layout), read by the samplers: MS MARCO
passage's 478M candidates as dicts would take about 39 GB in every process.

Sorted ids (``queries.npy``, ``docs.npy``: a row is a code), ``candidate_offsets``/``candidate_docs`` in trec_eval's
order (scores dropped), ``qrel_offsets``/``qrel_docs``/``qrel_labels``, and ``table.json`` last. `TableBuilder`
streams a task into one, saved once in the cache (`TrainingTable.saved`); `TrainingTable.open` maps it read-only,
shared through the page cache; `TrainingTable.from_dicts` tables dicts in memory.
"""

from __future__ import annotations

import json
import os
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

import numpy as np

from common.data.formats import DataFormatError, Qrels, Run
from common.io import atomic_write, built_once

#: The layout this module writes; a cached table of another format is rebuilt.
FORMAT = 1
ARRAYS = ("queries", "docs", "candidate_offsets", "candidate_docs", "qrel_offsets", "qrel_docs", "qrel_labels")
META = "table.json"
#: Candidates read at a time where a whole column is scanned.
CHUNK = 1 << 24


class RepeatedPairError(DataFormatError):
    """A (query, document) pair judged or retrieved twice; `query_id` and `doc_id` name it."""

    def __init__(self, path: str | os.PathLike, line: int | None, reason: str, query_id: str, doc_id: str):
        super().__init__(path, line, reason)
        self.query_id, self.doc_id = query_id, doc_id


class CodedTable:
    """Columns over query and document codes (the sorted ids ``queries`` and ``docs``: a row is a code), saved as
    ``<name>.npy`` each and a JSON record written last (`META`: its `FORMAT`, the source, `counts`), mapped read-only
    when opened: `TrainingTable`'s, and `common.data.triples`' provided triples."""

    FORMAT: int
    ARRAYS: tuple[str, ...]
    META: str

    def __init__(self, arrays: Mapping[str, np.ndarray], meta: dict | None = None, folder: Path | None = None):
        self.folder, self.meta = folder, meta or {}
        self.queries, self.docs = arrays["queries"], arrays["docs"]  # (Q,), (D,) sorted S<w>

    def counts(self) -> dict[str, int]:
        """What the JSON record counts of the table, beside its format and source."""
        raise NotImplementedError

    def save(self, folder: str | os.PathLike, source: dict) -> None:
        """Write the arrays into `folder` (``<name>.npy``) and the record last; `source` says what they are of."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        for name in self.ARRAYS:
            with atomic_write(folder / f"{name}.npy", "wb") as f:
                np.save(f, getattr(self, name), allow_pickle=False)
        with atomic_write(folder / self.META) as f:
            json.dump({"format": self.FORMAT, "source": source, **self.counts()}, f, indent=1)
            f.write("\n")

    @classmethod
    def open(cls, folder: str | os.PathLike):
        folder = Path(folder)
        meta = json.loads((folder / cls.META).read_text(encoding="utf-8"))
        return cls({name: np.load(folder / f"{name}.npy", mmap_mode="r", allow_pickle=False) for name in cls.ARRAYS},
                   meta, folder)

    @classmethod
    def saved(cls, folder: str | os.PathLike, make: Callable[[], CodedTable], source: dict):
        """The table saved in `folder`, made and saved there first where it is not (`common.io.built_once`)."""
        built_once(Path(folder), lambda tmp: make().save(tmp, source), ready=cls.is_saved)
        return cls.open(folder)

    @classmethod
    def is_saved(cls, folder: Path) -> bool:
        try:
            return json.loads((folder / cls.META).read_text(encoding="utf-8")).get("format") == cls.FORMAT
        except (OSError, ValueError):
            return False

    def query_id(self, query: int) -> str:
        return self.queries[query].decode("utf-8")

    def doc_ids(self, codes: Iterable[int]) -> list[str]:
        return [doc_id.decode("utf-8") for doc_id in self.docs[np.asarray(codes, dtype=np.int64)].tolist()]


class TrainingTable(CodedTable):
    """A training task's qrels and candidates by query code (module docstring); arrays in memory or mapped."""

    FORMAT, ARRAYS, META = FORMAT, ARRAYS, META

    def __init__(self, arrays: Mapping[str, np.ndarray], meta: dict | None = None, folder: Path | None = None):
        super().__init__(arrays, meta, folder)
        self.candidate_offsets, self.candidate_docs = arrays["candidate_offsets"], arrays["candidate_docs"]
        self.qrel_offsets, self.qrel_docs = arrays["qrel_offsets"], arrays["qrel_docs"]
        self.qrel_labels = arrays["qrel_labels"]

    @classmethod
    def from_dicts(cls, qrels: Qrels, candidates: Run) -> TrainingTable:
        """The table of a task's qrels (``{qid: {doc_id: label}}``) and candidates (``{qid: {doc_id: score}}``)."""
        builder = TableBuilder("qrels", "candidates")
        builder.add_qrels((qid, doc_id, label) for qid, labels in qrels.items() for doc_id, label in labels.items())
        builder.add_candidates((qid, doc_id, score) for qid, scores in candidates.items()
                               for doc_id, score in scores.items())
        return builder.table()

    def counts(self) -> dict[str, int]:
        return {"queries": len(self.queries), "documents": len(self.docs), "candidates": len(self.candidate_docs),
                "judgments": len(self.qrel_docs)}

    def __len__(self) -> int:
        return len(self.queries)

    def judged_queries(self) -> np.ndarray:
        return np.flatnonzero(np.diff(self.qrel_offsets) > 0)

    def candidates(self, query: int, depth: int | None = None) -> np.ndarray:
        """Query `query`'s top-`depth` candidates' document codes (int32), in trec_eval's order."""
        start, end = self.candidate_offsets[query], self.candidate_offsets[query + 1]
        return np.asarray(self.candidate_docs[start : end if depth is None else min(end, start + depth)])

    def judgments(self, query: int) -> tuple[np.ndarray, np.ndarray]:
        """Query `query`'s judged document codes (ascending) and their labels."""
        start, end = self.qrel_offsets[query], self.qrel_offsets[query + 1]
        return np.asarray(self.qrel_docs[start:end]), np.asarray(self.qrel_labels[start:end])

    def codes(self, doc_ids: Iterable[str]) -> np.ndarray:
        """The codes of `doc_ids` (int64), which must be documents of the table (KeyError)."""
        wanted = np.array([doc_id.encode("utf-8") for doc_id in doc_ids], dtype=np.bytes_)
        if not len(wanted):
            return np.zeros(0, dtype=np.int64)
        codes = np.minimum(np.searchsorted(self.docs, wanted), len(self.docs) - 1)
        absent = self.docs[codes] != wanted
        if absent.any():
            raise KeyError(f"document {wanted[absent][0].decode()!r} is not in the training table")
        return codes.astype(np.int64)

    def relevant_documents(self, queries: np.ndarray, level: int) -> np.ndarray:
        """The distinct codes of the documents judged at least `level` for the masked `queries`."""
        rows = np.repeat(queries, np.diff(self.qrel_offsets))  # (J,): judgments are few (MS MARCO's 532,761)
        return np.unique(self.qrel_docs[rows & (np.asarray(self.qrel_labels) >= level)])

    def candidate_documents(self, queries: np.ndarray) -> np.ndarray:
        """The distinct codes of the candidates of the masked `queries`, read `CHUNK` at a time."""
        seen = np.zeros(len(self.docs), dtype=bool)
        for start, end in _runs(queries):
            low, high = int(self.candidate_offsets[start]), int(self.candidate_offsets[end])
            for chunk in range(low, high, CHUNK):
                seen[self.candidate_docs[chunk : min(high, chunk + CHUNK)]] = True
        return np.flatnonzero(seen)

    def without(self, docs: np.ndarray) -> TrainingTable:
        """This table, in memory, without the candidates and judgments of documents `docs`; every id keeps its code."""
        drop = np.zeros(len(self.docs), dtype=bool)
        drop[docs] = True
        arrays = {"queries": self.queries, "docs": self.docs}
        for kind, columns in (("candidate", ("candidate_docs",)), ("qrel", ("qrel_docs", "qrel_labels"))):
            offsets, kept = np.asarray(getattr(self, f"{kind}_offsets")), ~drop[getattr(self, f"{kind}_docs")]
            arrays[f"{kind}_offsets"] = offsets - np.searchsorted(np.flatnonzero(~kept), offsets)
            arrays.update({column: np.asarray(getattr(self, column))[kept] for column in columns})
        return TrainingTable(arrays, self.meta)

    def labels(self, query: int, docs: np.ndarray) -> np.ndarray:
        """The qrels labels of documents `docs` (codes) for query `query`, 0 where unjudged (int64)."""
        judged, labels = self.judgments(query)
        if not len(judged):
            return np.zeros(len(docs), dtype=np.int64)
        where = np.minimum(np.searchsorted(judged, docs), len(judged) - 1)
        return np.where(judged[where] == docs, labels[where], 0).astype(np.int64)


class TableBuilder:
    """Collects a task's judgments and candidates, as streams of records, into a `TrainingTable`."""

    def __init__(self, what_qrels: str, what_candidates: str):
        self.what_qrels, self.what_candidates = what_qrels, what_candidates
        self._queries: dict[str, int] = {}
        self._docs: dict[str, int] = {}
        self._qrels = (array("i"), array("i"), array("i"))  # query, doc, label
        self._candidates = (array("i"), array("i"), array("f"))  # query, doc, score (float32: trec_eval's)
        self.distinct_scores: set[float] = set()

    def add_qrels(self, records: Iterable[tuple[str, str, int]]) -> None:
        queries, docs, labels = self._qrels
        for qid, doc_id, label in records:
            queries.append(self._queries.setdefault(qid, len(self._queries)))
            docs.append(self._docs.setdefault(doc_id, len(self._docs)))
            labels.append(label)

    def add_candidates(self, records: Iterable[tuple[str, str, float]]) -> None:
        queries, docs, scores = self._candidates
        for qid, doc_id, score in records:
            queries.append(self._queries.setdefault(qid, len(self._queries)))
            docs.append(self._docs.setdefault(doc_id, len(self._docs)))
            scores.append(score)
            if len(self.distinct_scores) < 2:
                self.distinct_scores.add(score)

    @property
    def candidate_count(self) -> int:
        return len(self._candidates[0])

    def table(self) -> TrainingTable:
        queries, query_order = sorted_ids(self._queries)
        docs, doc_order = sorted_ids(self._docs)
        self._queries = self._docs = {}
        q, d, labels = (np.frombuffer(a, dtype=np.int32) for a in self._qrels)
        q, d = query_order[q], doc_order[d]
        order = np.lexsort((d, q))
        q, d, labels = q[order], d[order], labels[order]
        _refuse_repeats(q, d, queries, docs, self.what_qrels, "judged twice")
        qrel_offsets = _offsets(q, len(queries))

        cq, cd, scores = (np.frombuffer(a, dtype=t) for a, t in zip(self._candidates, (np.int32, np.int32, np.float32)))
        if np.isnan(scores).any():
            raise DataFormatError(self.what_candidates, None, "NaN score")
        cq, cd = query_order[cq], doc_order[cd]
        order = np.lexsort((-cd.astype(np.int64), -scores, cq))  # query, score descending, doc id descending
        cq, cd = cq[order], cd[order]
        check = np.lexsort((cd, cq))
        _refuse_repeats(cq[check], cd[check], queries, docs, self.what_candidates, "retrieved twice")
        return TrainingTable({"queries": queries, "docs": docs, "qrel_offsets": qrel_offsets,
                              "qrel_docs": d.astype(np.int32), "qrel_labels": labels.astype(np.int32),
                              "candidate_offsets": _offsets(cq, len(queries)), "candidate_docs": cd.astype(np.int32)})


def sorted_ids(codes: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """The ids of `codes` sorted (S<w>, (N,)) and, by arrival code, each one's row in them ((N,) int32)."""
    encoded = [key.encode("utf-8") for key in codes]
    if any(key.endswith(b"\0") for key in encoded):
        raise ValueError("ids must not end with a NUL character")
    ids = np.array(encoded, dtype=np.bytes_) if encoded else np.array([], dtype="S1")
    order = np.argsort(ids, kind="stable")
    rows = np.empty(len(ids), dtype=np.int32)
    rows[order] = np.arange(len(ids), dtype=np.int32)
    return ids[order], rows


def _runs(mask: np.ndarray) -> Iterator[tuple[int, int]]:
    edges = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    yield from zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist())


def _offsets(queries: np.ndarray, count: int) -> np.ndarray:
    """(count + 1,) int64 offsets of each query's rows in `queries` (sorted codes)."""
    return np.concatenate([[0], np.cumsum(np.bincount(queries, minlength=count))]).astype(np.int64)


def _refuse_repeats(queries: np.ndarray, docs: np.ndarray, query_ids: np.ndarray, doc_ids: np.ndarray, what: str,
                    how: str) -> None:
    """DataFormatError naming the first (query, document) pair listed twice in `queries`/`docs` (sorted pairs)."""
    repeated = np.flatnonzero((queries[1:] == queries[:-1]) & (docs[1:] == docs[:-1]))
    if len(repeated):
        query_id, doc_id = query_ids[queries[repeated[0]]].decode(), doc_ids[docs[repeated[0]]].decode()
        raise RepeatedPairError(what, None, f"document {doc_id!r} {how} for query {query_id!r}", query_id, doc_id)
