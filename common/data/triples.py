"""A task's provided training triples as memory-mapped columns (`TriplesTable`), and the training groups they make
(`TriplesSampler`): MS MARCO's ``triples.train.small`` (ir_datasets' ``msmarco-passage/train/triples-small``,
39,780,811 (query, positive passage, negative passage) ids: MVA's "training triples provided by MSMARCO", EARL's
configs' reading of its "subset of Marco’s training set") would take several GB as Python tuples in every process.

Sorted ids (``queries.npy``, ``docs.npy``: a row is a code, as `common.data.training_table`'s), ``triples.npy``
((N, 3) int32: the query's, the positive's and the negative's codes, in the triples' order) and ``triples.json``
last. `TriplesTable.of` tables a stream of id triples in memory; `TriplesTable.saved` builds one once in the cache
(`common.io.built_once`); `TriplesTable.open` maps it read-only, shared through the page cache.

`TriplesSampler`: group ``i`` is the ``i``-th triple kept, ``(positive, negative)`` with labels ``(1, 0)``: one
pair of a pairwise loss (EARL's hinge, MVA's softmax over the two), the positive first as
`common.training.tasks.EncodedGroups` reads a group. A triple is kept where its query is one of the training task's
topics, so that queries held out of the training task (MS MARCO's ``split200-valid``, which selects the checkpoint)
are not trained on. The groups do not change with the epoch: the training loader draws each epoch's order of them
(`common.training.global_batch`), and a run of fewer steps than an epoch trains on a random subset of the triples.
"""

from __future__ import annotations

import json
import os
from array import array
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path

import numpy as np

from common.data.samplers import TrainingGroup
from common.data.training_table import sorted_ids
from common.io import atomic_write, built_once

#: The layout this module writes; a cached table of another format is rebuilt.
FORMAT = 1
ARRAYS = ("queries", "docs", "triples")
META = "triples.json"


class TriplesTable:
    """(query, positive, negative) triples by code (module docstring); arrays in memory or mapped."""

    def __init__(self, arrays: Mapping[str, np.ndarray], meta: dict | None = None, folder: Path | None = None):
        self.folder, self.meta = folder, meta or {}
        self.queries, self.docs = arrays["queries"], arrays["docs"]  # (Q,), (D,) sorted S<w>
        self.triples = arrays["triples"]  # (N, 3) int32: query, positive, negative codes

    @classmethod
    def of(cls, triples: Iterable[tuple[str, str, str]]) -> TriplesTable:
        """The table of (query id, positive id, negative id) `triples`, in their order."""
        queries: dict[str, int] = {}
        docs: dict[str, int] = {}
        columns = (array("i"), array("i"), array("i"))  # arrival codes: query, positive, negative
        for qid, positive, negative in triples:
            columns[0].append(queries.setdefault(qid, len(queries)))
            columns[1].append(docs.setdefault(positive, len(docs)))
            columns[2].append(docs.setdefault(negative, len(docs)))
        query_ids, query_rows = sorted_ids(queries)
        doc_ids, doc_rows = sorted_ids(docs)
        q, p, n = (np.frombuffer(column, dtype=np.int32) for column in columns)
        coded = np.stack([query_rows[q], doc_rows[p], doc_rows[n]], axis=1) if len(q) else np.zeros((0, 3), np.int32)
        return cls({"queries": query_ids, "docs": doc_ids, "triples": coded.astype(np.int32)})

    def save(self, folder: str | os.PathLike, source: dict) -> None:
        """Write the arrays into `folder` (``<name>.npy``) and ``triples.json`` last; `source` says what they are of."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        for name in ARRAYS:
            with atomic_write(folder / f"{name}.npy", "wb") as f:
                np.save(f, getattr(self, name), allow_pickle=False)
        with atomic_write(folder / META) as f:
            json.dump({"format": FORMAT, "source": source, "queries": len(self.queries), "documents": len(self.docs),
                       "triples": len(self.triples)}, f, indent=1)
            f.write("\n")

    @classmethod
    def open(cls, folder: str | os.PathLike) -> TriplesTable:
        folder = Path(folder)
        meta = json.loads((folder / META).read_text(encoding="utf-8"))
        return cls({name: np.load(folder / f"{name}.npy", mmap_mode="r", allow_pickle=False) for name in ARRAYS},
                   meta, folder)

    @classmethod
    def saved(cls, folder: str | os.PathLike, make: Callable[[], TriplesTable], source: dict) -> TriplesTable:
        """The table saved in `folder`, made and saved there first where it is not (`common.io.built_once`)."""
        built_once(Path(folder), lambda tmp: make().save(tmp, source), ready=cls.is_saved)
        return cls.open(folder)

    @staticmethod
    def is_saved(folder: Path) -> bool:
        try:
            return json.loads((folder / META).read_text(encoding="utf-8")).get("format") == FORMAT
        except (OSError, ValueError):
            return False

    def __len__(self) -> int:
        return len(self.triples)

    def query_id(self, query: int) -> str:
        return self.queries[query].decode("utf-8")

    def doc_ids(self, codes: Iterable[int]) -> list[str]:
        return [doc_id.decode("utf-8") for doc_id in self.docs[np.asarray(codes, dtype=np.int64)].tolist()]


class TriplesSampler:
    """The training groups of a `TriplesTable`'s triples whose query is among `topics` (module docstring)."""

    def __init__(self, table: TriplesTable, topics: Collection[str]):
        self.table = table
        wanted = np.array([qid.encode("utf-8") for qid in topics], dtype=np.bytes_)
        kept_queries = np.isin(table.queries, wanted)  # (Q,) bool
        self._rows = np.flatnonzero(kept_queries[np.asarray(table.triples[:, 0])])  # (kept,) rows of the table
        self.left_out = len(table) - len(self._rows)  # triples of queries not among `topics`
        if not len(self._rows):
            raise ValueError(f"no training triples: none of the {len(table):,} triples' {len(table.queries):,} "
                             f"queries is a topic of the training task")

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, index: int) -> TrainingGroup:
        return self.item(index, 0)

    def item(self, index: int, epoch: int) -> TrainingGroup:
        """Group `index`: the `index`-th kept triple as (positive, negative), whatever the `epoch`."""
        if not 0 <= index < len(self._rows):
            raise IndexError(f"index {index} out of range for {len(self._rows)} triples")
        query, positive, negative = self.table.triples[self._rows[index]].tolist()
        return TrainingGroup(self.table.query_id(query), tuple(self.table.doc_ids([positive, negative])), (1.0, 0.0))
