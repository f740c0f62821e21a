"""Training examples for re-rankers: one group of documents per (query, positive document) or per query.

Four samplers, each a map-style dataset (``len`` and ``[i]``, usable by a torch
``DataLoader`` directly) whose item ``i`` is the `TrainingGroup` of the i-th
*anchor*, a (query, relevant document) pair (for `LabelGroupSampler`, a query):

- `PointwiseSampler`: the positive and `negatives` documents from the query's
  top-`depth` candidates, binary labels 1/0 for a BCE loss. QDS-Transformer
  (Jiang et al. 2020) trains so with one negative per positive.
- `PairwiseSampler`: RankNet pairs as in Conformer-Kernel (Mitra et al. 2021,
  Sec. 4, "Model training"): for every positive, one negative "from the provided
  top 100 candidates" and two "from the full collection"; pairs put the
  positive above the three negatives and the top-100 negative above the two
  random ones ("treating the former as more relevant", weak supervision).
  With graded qrels the top-100 document is drawn from a *lower label group*
  than the positive's, so a positive of label 3 can be paired with one of label 1.
- `LabelGroupSampler`: Conformer-Kernel as its official code trains
  (bmitra-msft/TREC-Deep-Learning-Quick-Start, data.py,
  ``TRECSupervisedTrainDataset``): one group per *query*, not per positive. The
  query's top-`depth` candidates get the label ``max(qrel, 0) + 1`` (unjudged:
  1; the official ``qrel + 1`` without the clip, MS MARCO having no negative
  grades) and are grouped by it; two distinct label groups are picked at random (the
  only one when all share a label), one candidate from each, higher label
  first, then random collection documents of label 0 up to `group_size`
  (default 4); pairs are every two documents with different labels (the
  official RankNet loss masks pairs by label difference). It differs from
  `PairwiseSampler`, which follows the paper's prose (per positive: the
  positive, 1 top-100 and 2 random negatives): a query counts once however many
  positives it has, and only candidates enter a group, so a positive outside
  the top `depth` is never used (when no candidate is judged, the group is one
  unjudged candidate above three random documents). The official code draws its
  random documents from all 3.2M MS MARCO documents, where hitting a candidate
  is negligible; here they exclude the query's candidates and relevant
  documents, which matters on small collections.
- `SoftmaxSampler`: the positive and `negatives` top-`depth` negatives, for a
  listwise softmax cross-entropy with the positive at index 0 (MVA, Sec. 2.3).

Label semantics. A document is *relevant* when its qrels label is at least
`relevance_level` (default 1); a candidate with a lower label, or unjudged, is
*non-relevant* (unjudged counts as non-relevant, as in MS MARCO training). The
candidates are a query's top `depth` documents in trec_eval's order. Positives
need not be among the candidates (MS MARCO's often are not), unless ``positives="candidates"``:
then only the relevant documents among a query's top-`depth` candidates are anchors, as the
official QDS-Transformer sampler takes them (hallogameboy/QDS-Transformer, ``src/utils.py``
lines 272-279: ``pos_records`` are the top-100 lines whose qrels label is positive). Pairwise labels
are preference levels: the qrels label (negatives clipped to 0, unjudged = 0)
for candidates and `RANDOM_LABEL` (-1) for documents drawn from the collection,
so every pair (a, b) has ``labels[a] > labels[b]``.

Impossible configurations. A query without candidates, or whose candidates are
all relevant, has no negatives: its anchors are skipped and counted in
`SamplerStats` (a pairwise anchor likewise when no candidate has a lower label;
for `LabelGroupSampler` only a query without candidates, as one anchor).
When a query has fewer eligible negatives than asked, they are drawn with
replacement so every group has the same size; `SamplerStats.short_queries`
counts such queries. A sampler left with no anchor at all raises ValueError.

Determinism. Item ``i`` of epoch ``e`` (``item(i, e)``; ``[i]`` uses the epoch
of ``set_epoch``) is drawn from a numpy Generator seeded with ``(seed, e, i)``,
so an epoch depends on (seed, epoch) alone: not on access order, DataLoader
workers, or how DDP ranks split the indices. Anchors are sorted by (query id,
document id) (query id alone for `LabelGroupSampler`), so the order of the
input files does not matter either. Call ``set_epoch(e)`` for new negatives each epoch.

Memory. A sampler reads its task through a `common.data.training_table.TrainingTable` (`training_table`: an
ir_datasets task's is memory-mapped from the cache; `GroupSampler.of` tables qrels and candidate dicts) and keeps
only its anchors, three integers each; an item reads its query's candidates when drawn. Random documents come from
the collection's ids as numpy bytes (`collection_ids`: an ir_datasets collection's are mapped from the cache).

With Lightning: let the DataLoader choose the indices and the epoch (the training loader of
`common.training.tasks` hands each DDP process its slice of every global batch as ``(epoch, index)`` keys,
`common.training.global_batch`, and `common.training.tasks.SamplerGroups` draws ``item(index, epoch)``), so that a
worker, persistent or not, and a run resumed mid-epoch draw the loop's epoch. Items are dataclasses of strings; the
model's ``collate_fn`` tokenises them (`common.data.source.DocumentLookup` gives text).
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
        """The pairs as (qid, preferred doc, other doc)."""
        return [(self.qid, self.doc_ids[i], self.doc_ids[j]) for i, j in self.pairs]


@dataclass(frozen=True)
class SamplerStats:
    anchors: int  # (query, positive) pairs (queries for LabelGroupSampler): the dataset's length
    queries: int  # queries with at least one anchor
    skipped_queries: int  # queries with a positive but no usable negative
    skipped_anchors: int  # their anchors, plus pairwise anchors with no lower-label candidate
    short_queries: int  # queries with fewer eligible negatives than asked (drawn with replacement)


@dataclass(frozen=True)
class _Anchor:
    """One item: a query (its code in the table and its id) and its positive (none for the per-query
    `LabelGroupSampler`)."""

    query: int
    qid: str
    doc_id: str = ""
    label: int = 0


@dataclass(frozen=True)
class _QueryAnchors:
    """What one query contributes: its usable anchors ((query, positive, label) codes), how many were dropped, and
    whether its pool is short."""

    usable: list[tuple[int, int, int]] = field(default_factory=list)
    skipped: int = 0  # anchors without a usable negative
    short: bool = False  # fewer eligible negatives than asked: drawn with replacement


class GroupSampler:
    """Anchors, candidate pools and per-item seeding shared by the four samplers, over a task's `TrainingTable`.

    A subclass draws a group in `_group`; by default each relevant document of a query is an anchor, and a
    subclass that enumerates its items otherwise (`LabelGroupSampler`: one per query) overrides `_query_anchors`.
    The sampler keeps only its anchors, (query, positive, label) codes; an item reads its query's candidates from
    the table (memory-mapped for a cached task) when it is drawn. `of` makes one from qrels and candidate dicts.
    """

    def __init__(
        self,
        table: TrainingTable,
        *,
        topics: Topics | None = None,
        depth: int = 100,
        relevance_level: int = 1,
        positives: str = "qrels",
        seed: int = 0,
    ):
        if depth < 1:
            raise ValueError(f"depth must be positive, got {depth}")
        if positives not in POSITIVES:
            raise ValueError(f"unknown positives {positives!r}; expected one of {', '.join(POSITIVES)}")
        self.depth, self.relevance_level, self.positives, self.seed = depth, relevance_level, positives, seed
        self.epoch = 0
        self.table = table
        anchors: list[tuple[int, int, int]] = []
        queries = skipped_queries = skipped_anchors = short = 0
        judged = table.judged_queries()
        for query in judged.tolist():  # in query id order
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
        self._stats = SamplerStats(len(anchors), queries, skipped_queries, skipped_anchors, short)
        if not anchors:
            raise ValueError(
                f"no training examples: none of the {len(judged)} qrels queries has a relevant document "
                f"(label >= {relevance_level}) and a usable negative (for label groups: any candidate) among its "
                f"top-{depth} candidates"
            )

    @classmethod
    def of(cls, qrels: Qrels, candidates: Run, *args, **options):
        """The sampler of a task's qrels and candidates as dicts (`TrainingTable.from_dicts`)."""
        return cls(TrainingTable.from_dicts(qrels, candidates), *args, **options)

    #: How many negatives each group draws from the candidates (set by the subclass before __init__; read by the
    #: per-positive `_query_anchors`).
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

    # -- dataset protocol --

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

    @property
    def stats(self) -> SamplerStats:
        return self._stats

    # -- drawing --

    def _group(self, anchor: _Anchor, rng: np.random.Generator) -> TrainingGroup:
        raise NotImplementedError

    def _draw_negatives(self, labels: np.ndarray, anchor: _Anchor, count: int, rng: np.random.Generator) -> list[int]:
        """`count` candidate indices among the anchor's eligible negatives (of candidate `labels`); with replacement
        only when short."""
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
    """A sampler whose groups add random collection documents (Mitra et al. 2021, "from the full collection"):
    distinct, and neither the query's candidates nor its relevant documents, drawn from `collection_ids` (strings,
    or numpy ``S`` bytes such as a mapped id array: the collection's ids are not copied into a list).

    A subclass says how many random documents a query's groups need (`_random_count`); the collection is checked
    for every query when the sampler is built.
    """

    def __init__(self, table: TrainingTable, collection_ids: Sequence[str] | np.ndarray | None = None, **options):
        if collection_ids is None or len(collection_ids) == 0:
            self._collection = np.array([], dtype="S1")
        elif isinstance(collection_ids, np.ndarray) and collection_ids.dtype.kind == "S":
            self._collection = collection_ids
        else:
            self._collection = np.array([doc_id.encode("utf-8") for doc_id in collection_ids], dtype=np.bytes_)
        super().__init__(table, **options)
        self._check_random_pool()

    def _random_count(self, query: int) -> int:
        raise NotImplementedError

    def _check_random_pool(self) -> None:
        """Fail now, not in a worker, if some query cannot get its random documents."""
        for query in np.unique(self._anchors[:, 0]).tolist():
            count = self._random_count(query)
            if count == 0:
                continue
            qid = self.table.query_id(query)
            if not len(self._collection):
                raise ValueError(f"{type(self).__name__} draws {count} random documents per group and needs the "
                                 "collection's document ids (collection_ids)")
            # The cheap bound settles large collections; only a tiny one needs the exact count.
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
    """Conformer-Kernel's RankNet groups: positive, top-`depth` lower-label documents, random collection documents.

    A group holds the positive, `top_negatives` candidates with a lower label than the positive's and
    `random_negatives` collection documents that are neither candidates nor judged relevant for the query.
    Pairs: positive > every other document; with `weak_supervision`, each top-`depth` document > each
    random one (Mitra et al. 2021: 1 top-100 and 2 random negatives, 5 pairs).
    """

    def __init__(
        self,
        table: TrainingTable,
        collection_ids: Sequence[str] | np.ndarray | None = None,
        *,
        top_negatives: int = 1,
        random_negatives: int = 2,
        weak_supervision: bool = True,
        **options,
    ):
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
    """Conformer-Kernel's official training groups: one per query, two label groups plus random documents.

    Follows ``TRECSupervisedTrainDataset.__getitem__`` of bmitra-msft/TREC-Deep-Learning-Quick-Start (data.py):
    the query's top-`depth` candidates are labelled ``max(qrel, 0) + 1`` (unjudged: 1) and grouped by label; two
    distinct groups are picked uniformly (the only group when all candidates share a label) and one candidate is
    drawn uniformly from each, the higher label first; random collection documents of label 0 fill the group up
    to `group_size` (the official ``num_rand_negs + 2``, 2 + 2 = 4). Pairs: every (i, j) with
    ``labels[i] > labels[j]``, as the official RankNetLoss masks them. Items are the queries with a relevant
    judgment (label >= `relevance_level`) and at least one candidate.
    """

    def __init__(
        self,
        table: TrainingTable,
        collection_ids: Sequence[str] | np.ndarray | None = None,
        *,
        group_size: int = 4,
        **options,
    ):
        if group_size < 2:
            raise ValueError(f"group_size must be at least 2 (two candidates), got {group_size}")
        self.group_size = group_size
        super().__init__(table, collection_ids, **options)

    def _query_anchors(self, query: int, positives: np.ndarray, labels: np.ndarray) -> _QueryAnchors:
        # One item per query, as the official dataset indexes queries; without candidates there is nothing to rank.
        if len(labels) == 0:
            return _QueryAnchors(skipped=1)
        return _QueryAnchors([(query, -1, 0)])

    def _label_groups(self, labels: np.ndarray) -> dict[int, np.ndarray]:
        """Candidate indices by official label ``max(qrel, 0) + 1`` (of candidate `labels`), labels ascending."""
        levels = np.maximum(labels, 0) + 1
        return {int(level): np.flatnonzero(levels == level) for level in np.unique(levels)}

    def _random_count(self, query: int) -> int:
        # Two candidates when the query has two label groups, else one; group_size >= 2 keeps this >= 0.
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
    """The `TrainingTable` of a task: its own (`training_table()`: ir_datasets' cached, mapped table) where it has
    one, else one made of its qrels and candidates dicts."""
    own = getattr(source, "training_table", None)
    return own() if callable(own) else TrainingTable.from_dicts(source.qrels(), source.candidates())


def collection_ids(source: RankingSource) -> Sequence[str] | np.ndarray:
    """The ids of a task's collection, in its order: its own mapped array (``collection_ids()``) where it has one,
    else a list of its documents' ids."""
    own = getattr(source, "collection_ids", None)
    return own() if callable(own) else list(source.documents())


def from_source(kind: str, source: RankingSource, **options) -> GroupSampler:
    """A sampler (``"pointwise"``, ``"pairwise"``, ``"label_groups"`` or ``"softmax"``) over a `RankingSource`.

    The pairwise and label-group samplers draw random documents from the source's document ids (`collection_ids`),
    which must be iterable (a `DocumentStore` is).
    """
    samplers = {"pointwise": PointwiseSampler, "pairwise": PairwiseSampler, "label_groups": LabelGroupSampler,
                "softmax": SoftmaxSampler}
    if kind not in samplers:
        raise ValueError(f"unknown sampler {kind!r}; expected one of {', '.join(samplers)}")
    draws_random = kind == "label_groups" or (kind == "pairwise" and options.get("random_negatives", 2))
    if draws_random and "collection_ids" not in options:
        options["collection_ids"] = collection_ids(source)
    return samplers[kind](training_table(source), topics=source.topics(), **options)


__all__ = [
    "POSITIVES", "RANDOM_LABEL", "GroupSampler", "LabelGroupSampler", "PairwiseSampler", "PointwiseSampler",
    "SamplerStats", "SoftmaxSampler", "TrainingGroup", "collection_ids", "from_source", "training_table",
]
