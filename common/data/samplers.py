"""Training examples for re-rankers: map-style datasets whose item ``i`` is the `TrainingGroup` of the i-th anchor.

- `PointwiseSampler`: positive and `negatives` top-`depth` candidates, labels 1/0 (QDS-Transformer); `SoftmaxSampler`:
  the same, positive at index 0, for a softmax cross-entropy (MVA, Sec. 2.3).
- `PairwiseSampler`: Conformer-Kernel's RankNet pairs (Mitra et al. 2021, Sec. 4): per positive, a top-100 candidate
  of a lower label group and two random collection documents (`RANDOM_LABEL`).
- `LabelGroupSampler`: Conformer-Kernel's official ``TRECSupervisedTrainDataset`` (data.py): per query, two label
  groups of ``max(qrel, 0) + 1`` (the clip is ours) and random documents up to `group_size`; random documents exclude
  the query's candidates and relevant documents (the official code draws from all 3.2M documents).

Unjudged counts as non-relevant; ``positives="candidates"`` keeps anchors among the candidates (QDS's ``src/utils.py``
272-279). Item ``i`` of epoch ``e`` is drawn from a generator seeded with ``(seed, e, i)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from common.data.formats import Qrels, Run, Topics
from common.data.source import RankingSource
from common.data.training_table import TrainingTable

#: Pairwise preference level of a document drawn from the whole collection: below every candidate.
RANDOM_LABEL = -1.0
#: Where positives come from: every judged relevant document, or only those among the top-`depth` candidates.
POSITIVES = ("qrels", "candidates")


@dataclass(frozen=True)
class TrainingGroup:
    """Documents to score together for one query; `pairs` are (i, j) with doc i preferred to doc j."""

    qid: str
    doc_ids: tuple[str, ...]
    labels: tuple[float, ...]
    pairs: tuple[tuple[int, int], ...] = ()

    def triples(self) -> list[tuple[str, str, str]]:
        return [(self.qid, self.doc_ids[i], self.doc_ids[j]) for i, j in self.pairs]


@dataclass(frozen=True)
class SamplerStats:
    anchors: int  # (query, positive) pairs (queries for LabelGroupSampler): the dataset's length
    queries: int
    skipped_queries: int  # queries with a positive but no usable negative
    skipped_anchors: int  # their anchors, plus pairwise anchors with no lower-label candidate
    short_queries: int  # queries with fewer eligible negatives than asked (drawn with replacement)


@dataclass(frozen=True)
class _Anchor:  # one item: a query (its table code and id) and its positive (none for `LabelGroupSampler`)
    query: int
    qid: str
    doc_id: str = ""
    label: int = 0


@dataclass(frozen=True)
class _QueryAnchors:

    usable: list[tuple[int, int, int]] = field(default_factory=list)
    skipped: int = 0
    short: bool = False


class GroupSampler:
    """Anchors, candidate pools and per-item seeding shared by the four samplers, over a task's `TrainingTable`."""

    def __init__(self, table: TrainingTable, *, topics: Topics | None = None, depth: int = 100,
                 relevance_level: int = 1, positives: str = "qrels", seed: int = 0):
        if depth < 1:
            raise ValueError(f"depth must be positive, got {depth}")
        if positives not in POSITIVES:
            raise ValueError(f"unknown positives {positives!r}; expected one of {', '.join(POSITIVES)}")
        self.depth, self.relevance_level, self.positives, self.seed = depth, relevance_level, positives, seed
        self.epoch, self.table = 0, table
        anchors: list[tuple[int, int, int]] = []
        queries = skipped_queries = skipped_anchors = short = 0
        judged = table.judged_queries()
        for query in judged.tolist():
            if topics is not None and table.query_id(query) not in topics:
                continue
            relevant = self._relevant(query)
            candidates = table.candidates(query, depth)
            if self.positives == "candidates":
                relevant = np.intersect1d(relevant, candidates)
            if not len(relevant):
                continue
            found = self._query_anchors(query, relevant, table.labels(query, candidates))
            skipped_anchors += found.skipped
            if not found.usable:
                skipped_queries += 1
                continue
            queries += 1
            anchors += found.usable
            short += found.short
        self._anchors = np.array(anchors, dtype=np.int64).reshape(-1, 3)  # (anchors, 3): query, positive, label
        self.stats = SamplerStats(len(anchors), queries, skipped_queries, skipped_anchors, short)
        if not anchors:
            raise ValueError(f"no training examples: none of the {len(judged)} qrels queries has a relevant document "
                             f"(label >= {relevance_level}) and a usable negative (for label groups: any candidate) "
                             f"among its top-{depth} candidates")

    @classmethod
    def of(cls, qrels: Qrels, candidates: Run, *args, **options):
        """The sampler of a task's qrels and candidates as dicts (`TrainingTable.from_dicts`)."""
        return cls(TrainingTable.from_dicts(qrels, candidates), *args, **options)

    #: Negatives each group draws from the candidates (set by the subclass before __init__).
    _top_count: int

    def _relevant(self, query: int) -> np.ndarray:
        """The codes of query `query`'s relevant documents (label >= `relevance_level`), ascending."""
        docs, labels = self.table.judgments(query)
        return docs[labels >= self.relevance_level]

    def _query_anchors(self, query: int, positives: np.ndarray, labels: np.ndarray) -> _QueryAnchors:
        """One anchor per positive that has a usable negative among the candidates (of candidate `labels`)."""
        positive_labels = self.table.labels(query, positives).tolist()
        pools = [len(self._eligible(labels, label)) for label in positive_labels]
        usable = [(query, doc, label) for doc, label, pool in zip(positives.tolist(), positive_labels, pools)
                  if pool > 0 or self._top_count == 0]
        return _QueryAnchors(usable, len(positives) - len(usable), any(0 < pool < self._top_count for pool in pools))

    def _eligible(self, labels: np.ndarray, anchor_label: int) -> np.ndarray:
        """Indices of the candidates that may serve as this anchor's negatives: the non-relevant ones."""
        return np.flatnonzero(labels < self.relevance_level)

    def _pool(self, query: int) -> tuple[np.ndarray, np.ndarray]:
        """Query `query`'s top-`depth` candidates (codes, trec_eval's order) and their labels (unjudged: 0)."""
        docs = self.table.candidates(query, self.depth)
        return docs, self.table.labels(query, docs)

    def __len__(self) -> int:
        return len(self._anchors)

    def __getitem__(self, index: int) -> TrainingGroup:
        return self.item(index, self.epoch)

    def item(self, index: int, epoch: int) -> TrainingGroup:
        """Group `index` of epoch `epoch`: a function of (seed, epoch, index) only."""
        if not 0 <= index < len(self._anchors):
            raise IndexError(f"index {index} out of range for {len(self._anchors)} anchors")
        query, doc, label = self._anchors[index].tolist()
        anchor = _Anchor(query, self.table.query_id(query), self.table.doc_ids([doc])[0] if doc >= 0 else "", label)
        return self._group(anchor, np.random.default_rng((self.seed, epoch, index)))

    def set_epoch(self, epoch: int) -> None:
        """Draw the negatives of epoch `epoch` from now on (see the module docstring)."""
        if epoch < 0:
            raise ValueError(f"epoch must be non-negative, got {epoch}")
        self.epoch = epoch

    def examples(self, epoch: int | None = None) -> list[TrainingGroup]:
        """Every group of one epoch (default: the current one), in anchor order."""
        epoch = self.epoch if epoch is None else epoch
        return [self.item(i, epoch) for i in range(len(self))]

    def _draw_negatives(self, labels: np.ndarray, anchor: _Anchor, count: int, rng: np.random.Generator) -> list[int]:
        """`count` candidate indices among the anchor's eligible negatives (of candidate `labels`)."""
        pool = self._eligible(labels, anchor.label)
        return [int(i) for i in rng.choice(pool, size=count, replace=len(pool) < count)]


class _ListSampler(GroupSampler):
    """Positive first, then `negatives` non-relevant candidates."""

    def __init__(self, table: TrainingTable, *, negatives: int, **options):
        if negatives < 1:
            raise ValueError(f"negatives must be at least 1, got {negatives}")
        self.negatives = self._top_count = negatives
        super().__init__(table, **options)

    def _group(self, anchor: _Anchor, rng: np.random.Generator) -> TrainingGroup:
        docs, labels = self._pool(anchor.query)
        negatives = self.table.doc_ids(docs[self._draw_negatives(labels, anchor, self.negatives, rng)])
        return TrainingGroup(anchor.qid, (anchor.doc_id, *negatives), (1.0,) + (0.0,) * len(negatives))


class PointwiseSampler(_ListSampler):
    """Positive + `negatives` top-`depth` negatives with BCE labels 1/0 (QDS-Transformer: negatives=1)."""

    def __init__(self, table: TrainingTable, *, negatives: int = 1, **options):
        super().__init__(table, negatives=negatives, **options)


class SoftmaxSampler(_ListSampler):
    """Positive at index 0 + `negatives` top-`depth` negatives, for a softmax cross-entropy over the group."""

    def __init__(self, table: TrainingTable, *, negatives: int = 7, **options):
        super().__init__(table, negatives=negatives, **options)


class _RandomDocumentSampler(GroupSampler):
    """A sampler whose groups add random collection documents (Mitra et al. 2021, "from the full collection")."""

    def __init__(self, table: TrainingTable, collection_ids: Sequence[str] | np.ndarray | None = None, **options):
        if collection_ids is None or len(collection_ids) == 0:
            self._collection = np.array([], dtype="S1")
        elif isinstance(collection_ids, np.ndarray) and collection_ids.dtype.kind == "S":
            self._collection = collection_ids
        else:
            self._collection = np.array([doc_id.encode("utf-8") for doc_id in collection_ids], dtype=np.bytes_)
        super().__init__(table, **options)
        self._check_random_pool()

    def _check_random_pool(self) -> None:
        for query in np.unique(self._anchors[:, 0]).tolist():
            count = self._random_count(query)
            if count == 0:
                continue
            qid = self.table.query_id(query)
            if not len(self._collection):
                raise ValueError(f"{type(self).__name__} draws {count} random documents per group and needs the "
                                 "collection's document ids (collection_ids)")
            most_excluded = len(self.table.candidates(query, self.depth)) + len(self._relevant(query))
            if len(self._collection) - most_excluded >= count:
                continue
            collection = {doc_id.decode("utf-8") for doc_id in self._collection.tolist()}
            if len(collection - self._excluded(query)) < count:
                raise ValueError(f"query {qid!r}: the collection has fewer than {count} documents "
                                 "outside its candidates and relevant documents")

    def _excluded(self, query: int) -> set[str]:
        return set(self.table.doc_ids(np.concatenate([self.table.candidates(query, self.depth),
                                                       self._relevant(query)])))

    def _draw_random(self, query: int, count: int, rng: np.random.Generator) -> list[str]:
        """`count` distinct collection documents outside the query's candidates and relevant documents (rejection)."""
        excluded, drawn = self._excluded(query), []
        while len(drawn) < count:
            doc_id = self._collection[int(rng.integers(len(self._collection)))].decode("utf-8")
            if doc_id not in excluded and doc_id not in drawn:
                drawn.append(doc_id)
        return drawn


class PairwiseSampler(_RandomDocumentSampler):
    """Conformer-Kernel's RankNet groups."""

    def __init__(self, table: TrainingTable, collection_ids: Sequence[str] | np.ndarray | None = None, *,
                 top_negatives: int = 1, random_negatives: int = 2, weak_supervision: bool = True, **options):
        if top_negatives < 0 or random_negatives < 0 or top_negatives + random_negatives == 0:
            raise ValueError(f"need at least one negative, got top_negatives={top_negatives}, "
                             f"random_negatives={random_negatives}")
        self.top_negatives = self._top_count = top_negatives
        self.random_negatives = random_negatives
        self.weak_supervision = weak_supervision
        super().__init__(table, collection_ids, **options)

    def _eligible(self, labels: np.ndarray, anchor_label: int) -> np.ndarray:
        """Candidates of a lower label group than the positive's (graded qrels; unjudged = 0)."""
        return np.flatnonzero(labels < anchor_label)

    def _random_count(self, query: int) -> int:
        return self.random_negatives

    def _group(self, anchor: _Anchor, rng: np.random.Generator) -> TrainingGroup:
        docs, labels = self._pool(anchor.query)
        top = self._draw_negatives(labels, anchor, self.top_negatives, rng) if self.top_negatives else []
        doc_ids = [anchor.doc_id, *self.table.doc_ids(docs[top]),
                   *self._draw_random(anchor.query, self.random_negatives, rng)]
        levels = [float(anchor.label)] + [float(max(labels[i], 0)) for i in top] + \
                 [RANDOM_LABEL] * self.random_negatives
        pairs = [(0, j) for j in range(1, len(doc_ids))]
        if self.weak_supervision:
            first_random = 1 + len(top)
            pairs += [(i, j) for i in range(1, first_random) for j in range(first_random, len(doc_ids))]
        return TrainingGroup(anchor.qid, tuple(doc_ids), tuple(levels), tuple(pairs))


class LabelGroupSampler(_RandomDocumentSampler):
    """Conformer-Kernel's official training groups: one per query, two label groups plus random documents."""

    def __init__(self, table: TrainingTable, collection_ids: Sequence[str] | np.ndarray | None = None, *,
                 group_size: int = 4, **options):
        if group_size < 2:
            raise ValueError(f"group_size must be at least 2 (two candidates), got {group_size}")
        self.group_size = group_size
        super().__init__(table, collection_ids, **options)

    def _query_anchors(self, query: int, positives: np.ndarray, labels: np.ndarray) -> _QueryAnchors:
        if len(labels) == 0:
            return _QueryAnchors(skipped=1)
        return _QueryAnchors([(query, -1, 0)])

    def _label_groups(self, labels: np.ndarray) -> dict[int, np.ndarray]:
        """Candidate indices by official label ``max(qrel, 0) + 1`` (of candidate `labels`), labels ascending."""
        levels = np.maximum(labels, 0) + 1
        return {int(level): np.flatnonzero(levels == level) for level in np.unique(levels)}

    def _random_count(self, query: int) -> int:
        return self.group_size - min(len(self._label_groups(self._pool(query)[1])), 2)

    def _group(self, anchor: _Anchor, rng: np.random.Generator) -> TrainingGroup:
        docs, labels = self._pool(anchor.query)
        groups = self._label_groups(labels)
        levels = list(groups)
        if len(levels) >= 2:
            chosen = rng.choice(len(levels), size=2, replace=False)
            picked = sorted((levels[int(k)] for k in chosen), reverse=True)
        else:
            picked = levels
        doc_ids = self.table.doc_ids([docs[int(rng.choice(groups[level]))] for level in picked])
        randoms = self._draw_random(anchor.query, self.group_size - min(len(groups), 2), rng)
        labels = [float(level) for level in picked] + [0.0] * len(randoms)
        pairs = [(i, j) for i in range(len(labels)) for j in range(len(labels)) if labels[i] > labels[j]]
        return TrainingGroup(anchor.qid, tuple(doc_ids + randoms), tuple(labels), tuple(pairs))


def training_table(source: RankingSource) -> TrainingTable:
    own = getattr(source, "training_table", None)
    return own() if callable(own) else TrainingTable.from_dicts(source.qrels(), source.candidates())


def collection_ids(source: RankingSource) -> Sequence[str] | np.ndarray:
    own = getattr(source, "collection_ids", None)
    return own() if callable(own) else list(source.documents())


def from_source(kind: str, source: RankingSource, **options) -> GroupSampler:
    """A sampler (``"pointwise"``, ``"pairwise"``, ``"label_groups"`` or ``"softmax"``) over a `RankingSource`."""
    samplers = {"pointwise": PointwiseSampler, "pairwise": PairwiseSampler, "label_groups": LabelGroupSampler,
                "softmax": SoftmaxSampler}
    if kind not in samplers:
        raise ValueError(f"unknown sampler {kind!r}; expected one of {', '.join(samplers)}")
    draws_random = kind == "label_groups" or (kind == "pairwise" and options.get("random_negatives", 2))
    if draws_random and "collection_ids" not in options:
        options["collection_ids"] = collection_ids(source)
    return samplers[kind](training_table(source), topics=source.topics(), **options)

