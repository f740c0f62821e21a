"""Training examples for re-rankers: one group of documents per (query, positive document).

Three samplers, each a map-style dataset (``len`` and ``[i]``, usable by a torch
``DataLoader`` directly) whose item ``i`` is the `TrainingGroup` of the i-th
*anchor*, a (query, relevant document) pair:

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
- `SoftmaxSampler`: the positive and `negatives` top-`depth` negatives, for a
  listwise softmax cross-entropy with the positive at index 0 (MVA, Sec. 2.3).

Label semantics. A document is *relevant* when its qrels label is at least
`relevance_level` (default 1); a candidate with a lower label, or unjudged, is
*non-relevant* (unjudged counts as non-relevant, as in MS MARCO training). The
candidates are a query's top `depth` documents in trec_eval's order. Positives
need not be among the candidates (MS MARCO's often are not). Pairwise labels
are preference levels: the qrels label (negatives clipped to 0, unjudged = 0)
for candidates and `RANDOM_LABEL` (-1) for documents drawn from the collection,
so every pair (a, b) has ``labels[a] > labels[b]``.

Impossible configurations. A query without candidates, or whose candidates are
all relevant, has no negatives: its anchors are skipped and counted in
`SamplerStats` (a pairwise anchor likewise when no candidate has a lower label).
When a query has fewer eligible negatives than asked, they are drawn with
replacement so every group has the same size; `SamplerStats.short_queries`
counts such queries. A sampler left with no anchor at all raises ValueError.

Determinism. Item ``i`` of epoch ``e`` (``item(i, e)``; ``[i]`` uses the epoch
of ``set_epoch``) is drawn from a numpy Generator seeded with ``(seed, e, i)``, so an epoch depends on (seed, epoch) alone: not on access
order, DataLoader workers, or how DDP ranks split the indices. Anchors are
sorted by (query id, document id), so the order of the input files does not
matter either. Call ``set_epoch(e)`` for new negatives each epoch.

With Lightning: let the DataLoader shuffle (Lightning swaps in a
DistributedSampler under DDP, which shards indices per rank and calls its own
``set_epoch``), call ``dataset.set_epoch(trainer.current_epoch)`` in
``LightningModule.on_train_epoch_start`` (it runs before the epoch's DataLoader
iterator, and so its worker processes, is created), and keep
``persistent_workers=False``: a persistent worker holds the dataset copy of the
epoch it was started in. Items are dataclasses of strings; the model's
``collate_fn`` tokenises them (`common.data.source.DocumentLookup` gives text).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from common.data.formats import Qrels, Run, Topics, ranked
from common.data.source import RankingSource

#: Pairwise preference level of a document drawn from the whole collection: below every candidate.
RANDOM_LABEL = -1.0


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
    anchors: int  # (query, positive) pairs: the dataset's length
    queries: int  # queries with at least one anchor
    skipped_queries: int  # queries with a positive but no usable negative
    skipped_anchors: int  # their anchors, plus pairwise anchors with no lower-label candidate
    short_queries: int  # queries with fewer eligible negatives than asked (drawn with replacement)


@dataclass(frozen=True)
class _Anchor:
    qid: str
    doc_id: str
    label: int


class GroupSampler:
    """Anchors, candidate pools and per-item seeding shared by the three samplers."""

    def __init__(
        self,
        qrels: Qrels,
        candidates: Run,
        *,
        topics: Topics | None = None,
        depth: int = 100,
        relevance_level: int = 1,
        seed: int = 0,
    ):
        if depth < 1:
            raise ValueError(f"depth must be positive, got {depth}")
        self.depth, self.relevance_level, self.seed = depth, relevance_level, seed
        self.epoch = 0
        self._qrels = qrels
        # Each query's top-`depth` candidates in trec_eval order, and their labels (unjudged = 0).
        self._candidates: dict[str, list[str]] = {}
        self._labels: dict[str, np.ndarray] = {}
        anchors: list[_Anchor] = []
        skipped_queries = skipped_anchors = 0
        short: set[str] = set()
        for qid in sorted(qrels):
            if topics is not None and qid not in topics:
                continue
            positives = sorted(d for d, label in qrels[qid].items() if label >= relevance_level)
            if not positives:
                continue
            docs = [doc_id for doc_id, _ in ranked(candidates.get(qid, {}))[:depth]]
            labels = np.array([qrels[qid].get(doc_id, 0) for doc_id in docs], dtype=np.int64)
            query_anchors = [_Anchor(qid, d, qrels[qid][d]) for d in positives]
            pools = [len(self._eligible(labels, a.label)) for a in query_anchors]
            usable = [a for a, pool in zip(query_anchors, pools) if pool > 0 or self._top_count == 0]
            if not usable:
                skipped_queries += 1
            skipped_anchors += len(query_anchors) - len(usable)
            if usable:
                self._candidates[qid], self._labels[qid] = docs, labels
                anchors += usable
                if any(0 < pool < self._top_count for pool in pools):
                    short.add(qid)
        self._anchors = anchors
        self._stats = SamplerStats(len(anchors), len(self._candidates), skipped_queries, skipped_anchors, len(short))
        if not anchors:
            raise ValueError(
                f"no training examples: none of the {len(qrels)} qrels queries has a relevant document "
                f"(label >= {relevance_level}) and a usable negative among its top-{depth} candidates"
            )

    #: How many negatives each group draws from the candidates (set by the subclass before __init__).
    _top_count: int

    def _eligible(self, labels: np.ndarray, anchor_label: int) -> np.ndarray:
        """Indices of the candidates that may serve as this anchor's negatives: the non-relevant ones."""
        return np.flatnonzero(labels < self.relevance_level)

    # -- dataset protocol --

    def __len__(self) -> int:
        return len(self._anchors)

    def __getitem__(self, index: int) -> TrainingGroup:
        return self.item(index, self.epoch)

    def item(self, index: int, epoch: int) -> TrainingGroup:
        """Group `index` of epoch `epoch`: a function of (seed, epoch, index) only."""
        if not 0 <= index < len(self._anchors):
            raise IndexError(f"index {index} out of range for {len(self._anchors)} anchors")
        return self._group(self._anchors[index], np.random.default_rng((self.seed, epoch, index)))

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

    def _draw_negatives(self, anchor: _Anchor, count: int, rng: np.random.Generator) -> list[int]:
        """`count` candidate indices among the anchor's eligible negatives; with replacement only when short."""
        pool = self._eligible(self._labels[anchor.qid], anchor.label)
        return [int(i) for i in rng.choice(pool, size=count, replace=len(pool) < count)]


class _ListSampler(GroupSampler):
    """Positive first, then `negatives` non-relevant candidates."""

    def __init__(self, qrels: Qrels, candidates: Run, *, negatives: int, **options):
        if negatives < 1:
            raise ValueError(f"negatives must be at least 1, got {negatives}")
        self.negatives = self._top_count = negatives
        super().__init__(qrels, candidates, **options)

    def _group(self, anchor: _Anchor, rng: np.random.Generator) -> TrainingGroup:
        docs = self._candidates[anchor.qid]
        negatives = [docs[i] for i in self._draw_negatives(anchor, self.negatives, rng)]
        return TrainingGroup(anchor.qid, (anchor.doc_id, *negatives), (1.0,) + (0.0,) * len(negatives))


class PointwiseSampler(_ListSampler):
    """Positive + `negatives` top-`depth` negatives with BCE labels 1/0 (QDS-Transformer: negatives=1)."""

    def __init__(self, qrels: Qrels, candidates: Run, *, negatives: int = 1, **options):
        super().__init__(qrels, candidates, negatives=negatives, **options)


class SoftmaxSampler(_ListSampler):
    """Positive at index 0 + `negatives` top-`depth` negatives, for a softmax cross-entropy over the group."""

    def __init__(self, qrels: Qrels, candidates: Run, *, negatives: int = 7, **options):
        super().__init__(qrels, candidates, negatives=negatives, **options)


class PairwiseSampler(GroupSampler):
    """Conformer-Kernel's RankNet groups: positive, top-`depth` lower-label documents, random collection documents.

    A group holds the positive, `top_negatives` candidates with a lower label than the positive's and
    `random_negatives` collection documents that are neither candidates nor judged relevant for the query.
    Pairs: positive > every other document; with `weak_supervision`, each top-`depth` document > each
    random one (Mitra et al. 2021: 1 top-100 and 2 random negatives, 5 pairs).
    """

    def __init__(
        self,
        qrels: Qrels,
        candidates: Run,
        collection_ids: Sequence[str] | None = None,
        *,
        top_negatives: int = 1,
        random_negatives: int = 2,
        weak_supervision: bool = True,
        **options,
    ):
        if top_negatives < 0 or random_negatives < 0 or top_negatives + random_negatives == 0:
            raise ValueError(f"need at least one negative, got top_negatives={top_negatives}, "
                             f"random_negatives={random_negatives}")
        if random_negatives and not collection_ids:
            raise ValueError("random_negatives > 0 needs the collection's document ids (collection_ids)")
        self.top_negatives = self._top_count = top_negatives
        self.random_negatives = random_negatives
        self.weak_supervision = weak_supervision
        self._collection = list(collection_ids or [])
        super().__init__(qrels, candidates, **options)
        if random_negatives:
            self._check_random_pool()

    def _eligible(self, labels: np.ndarray, anchor_label: int) -> np.ndarray:
        """Candidates of a lower label group than the positive's (graded qrels; unjudged = 0)."""
        return np.flatnonzero(labels < anchor_label)

    def _check_random_pool(self) -> None:
        """Fail now, not in a worker, if some query cannot get `random_negatives` distinct random documents."""
        for qid in self._candidates:
            excluded = self._excluded(qid)
            # The cheap bound settles large collections; only a tiny one needs the exact count.
            if len(self._collection) - len(excluded) < self.random_negatives and \
                    len(set(self._collection) - excluded) < self.random_negatives:
                raise ValueError(f"query {qid!r}: the collection has fewer than {self.random_negatives} documents "
                                 "outside its candidates and relevant documents")

    def _excluded(self, qid: str) -> set[str]:
        relevant = (d for d, label in self._qrels[qid].items() if label >= self.relevance_level)
        return set(self._candidates[qid]).union(relevant)

    def _draw_random(self, qid: str, rng: np.random.Generator) -> list[str]:
        """Distinct collection documents outside the query's candidates and relevant documents (rejection)."""
        excluded, drawn = self._excluded(qid), []
        while len(drawn) < self.random_negatives:
            doc_id = self._collection[int(rng.integers(len(self._collection)))]
            if doc_id not in excluded and doc_id not in drawn:
                drawn.append(doc_id)
        return drawn

    def _group(self, anchor: _Anchor, rng: np.random.Generator) -> TrainingGroup:
        docs, labels = self._candidates[anchor.qid], self._labels[anchor.qid]
        top = self._draw_negatives(anchor, self.top_negatives, rng) if self.top_negatives else []
        doc_ids = [anchor.doc_id] + [docs[i] for i in top] + self._draw_random(anchor.qid, rng)
        levels = [float(anchor.label)] + [float(max(labels[i], 0)) for i in top] + \
                 [RANDOM_LABEL] * self.random_negatives
        pairs = [(0, j) for j in range(1, len(doc_ids))]
        if self.weak_supervision:
            first_random = 1 + len(top)
            pairs += [(i, j) for i in range(1, first_random) for j in range(first_random, len(doc_ids))]
        return TrainingGroup(anchor.qid, tuple(doc_ids), tuple(levels), tuple(pairs))


def from_source(kind: str, source: RankingSource, **options) -> GroupSampler:
    """A sampler (``"pointwise"``, ``"pairwise"`` or ``"softmax"``) over a `RankingSource`'s qrels and candidates.

    The pairwise sampler draws random negatives from the source's document ids, which must be iterable
    (a `DocumentStore` is).
    """
    samplers = {"pointwise": PointwiseSampler, "pairwise": PairwiseSampler, "softmax": SoftmaxSampler}
    if kind not in samplers:
        raise ValueError(f"unknown sampler {kind!r}; expected one of {', '.join(samplers)}")
    if kind == "pairwise" and options.get("random_negatives", 2) and "collection_ids" not in options:
        options["collection_ids"] = list(source.documents())
    return samplers[kind](source.qrels(), source.candidates(), topics=source.topics(), **options)


__all__ = [
    "RANDOM_LABEL", "GroupSampler", "PairwiseSampler", "PointwiseSampler", "SamplerStats", "SoftmaxSampler",
    "TrainingGroup", "from_source",
]
