"""A task's judged queries split in two, a training part and a held-out part on which settings are chosen
(`heldout_queries`), and a task cut to one part (`QuerySubset`): what a task spec's ``queries: train`` and
``queries: heldout`` read (`common.data.specs`), so that no setting is chosen on a test year.

The rule. The judged queries are the query ids of the task's qrels. Each is ranked by the SHA-256 hex digest of
``f"{split_seed}:{qid}"`` (ascending; the id breaks a tie), and the first ``n // heldout_one_in`` of the n are held
out; the others are the training part. Why this rule:

- It depends on the set of ids alone, never on their order in a file, and on nothing a library version may change
  (numpy does not promise the same `Generator.permutation` across versions; SHA-256 is a standard): the split can be
  recomputed from the qrels with ``hashlib`` alone.
- Ranking by the digest, rather than holding out each query whose digest falls below a threshold, holds out exactly
  ``n // heldout_one_in`` queries; a threshold would hold out a binomial number (13.5 +- 3.2 of 54 at one in 4).
- ``split_seed`` (default 0) draws another split of the same size, e.g. to see whether a choice holds on other
  held-out queries; ``heldout_one_in`` (default 4) is an integer so that the size is integer arithmetic.

The size. One in 4: TREC DL 2020's 54 judged passage queries give 13 held out and 41 to train on. NDCG@10 over 13
queries is noisy: BM25's per-query NDCG@10 on those 54 queries has a standard deviation of 0.26, so a mean over 13
has a standard error of about 0.07 (``tests/common/data/test_query_split.py`` measures both). Two settings measured on
the same 13 queries differ by less noise than that where their per-query scores move together, which the runs'
``run.trec`` files show (``python -m common.evaluate -q``); a held-out gain of a few hundredths does not choose a
setting. Holding out more would take training queries from a training set already small (a third: 18 held out, 36
left), fewer would make the held-out mean noisier still (a fifth: 10, standard error 0.08); a quarter is between.

What a part holds. Its topics, qrels and candidates are those of its queries only (a query the qrels do not judge is
in neither part), so neither a training table nor an evaluation reads another part's query. Its documents and files
(``*_path``) are the task's own: the split is of queries, and a passage that two queries retrieve stays a candidate
of each; a held-out query's passage may still be met as text without its query or label (a random negative drawn
from the collection, a term of a vocabulary built on the collection).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from functools import cached_property

from common.data.formats import Qrels, Run, Topics
from common.data.source import RankingSource, read_once

#: A task spec's ``queries``: every query, the training part or the held-out part of the judged ones.
QUERIES = ("all", "train", "heldout")
#: The split's defaults (see the module docstring).
SPLIT_SEED = 0
HELDOUT_ONE_IN = 4
#: How a part is named in messages.
PART_NAMES = {"train": "training", "heldout": "held-out"}


class SplitError(ValueError):
    """A split that holds out no query (fewer judged queries than ``heldout_one_in``): one line naming the task."""


def heldout_queries(judged: Iterable[str], seed: int = SPLIT_SEED, one_in: int = HELDOUT_ONE_IN) -> frozenset[str]:
    """The held-out part of the query ids `judged` (see the module docstring): ``len // one_in`` of them."""
    ids = sorted(set(judged), key=lambda qid: (hashlib.sha256(f"{seed}:{qid}".encode()).hexdigest(), qid))
    return frozenset(ids[: len(ids) // one_in])


class QuerySubset:
    """A `RankingSource` cut to `part` (``train`` or ``heldout``) of its judged queries: their topics, qrels and
    candidates; the task's own documents and files. `name`: the task's name for messages and outputs."""

    def __init__(self, source: RankingSource, part: str, *, seed: int = SPLIT_SEED, one_in: int = HELDOUT_ONE_IN,
                 name: str = ""):
        if part not in PART_NAMES:
            raise ValueError(f"part must be one of {', '.join(PART_NAMES)}, got {part!r}")
        self._source, self.part, self.seed, self.one_in = source, part, seed, one_in
        self.name = name or f"{source.name}-{part}"

    def __getattr__(self, name: str):  # the task's files (rank_llm_path, qrels_path, ...), which fingerprints digest
        if name.endswith("_path") and not name.startswith("_"):
            return getattr(self._source, name)
        raise AttributeError(name)

    @cached_property
    def queries(self) -> frozenset[str]:
        """The ids of this part's queries."""
        judged = self._source.qrels()
        held = heldout_queries(judged, self.seed, self.one_in)
        if not held:
            raise SplitError(f"{self.name}: the qrels judge {len(judged)} queries, fewer than heldout_one_in "
                             f"({self.one_in}): none would be held out")
        return held if self.part == "heldout" else frozenset(judged) - held

    @read_once
    def topics(self) -> Topics:
        return {qid: text for qid, text in self._source.topics().items() if qid in self.queries}

    @read_once
    def qrels(self) -> Qrels:
        return {qid: labels for qid, labels in self._source.qrels().items() if qid in self.queries}

    @read_once
    def candidates(self) -> Run:
        return {qid: scores for qid, scores in self._source.candidates().items() if qid in self.queries}

    def documents(self):
        return self._source.documents()
