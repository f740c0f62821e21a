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

from array import array
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path

import numpy as np

from common.data.samplers import TrainingGroup
from common.data.training_table import CodedTable, sorted_ids

#: The layout this module writes; a cached table of another format is rebuilt.
FORMAT = 1
ARRAYS = ("queries", "docs", "triples")
META = "triples.json"


class TriplesTable(CodedTable):
    """(query, positive, negative) triples by code (module docstring); arrays in memory or mapped."""

    FORMAT, ARRAYS, META = FORMAT, ARRAYS, META

    def __init__(self, arrays: Mapping[str, np.ndarray], meta: dict | None = None, folder: Path | None = None):
        super().__init__(arrays, meta, folder)
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

    def counts(self) -> dict[str, int]:
        return {"queries": len(self.queries), "documents": len(self.docs), "triples": len(self.triples)}

    def __len__(self) -> int:
        return len(self.triples)


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
