"""Re-ranking a first-stage candidate run: the pairs to score, and the run made from their scores.

Conventions every ranker of the repository follows:

- Depth: each query's top-`depth` candidates are re-ranked (100 in the TREC DL re-ranking
  subtask); "top" is trec_eval's order (`common.metrics.ordering.ranked`: score rounded to float32,
  descending, then docid descending), so the pairs are the documents trec_eval ranks first.
- Scores travel as (index, score) rows: a float64 (N, 2) tensor whose first column is the
  position of the pair in the list `rerank_pairs` returned and the second its score. An
  evaluation loader may visit the pairs in any order (by document length, say) and every
  process of a distributed run scores a share of them; `gather_scores` collects every
  process's rows, and the index puts each score back on its pair.
- A padded ``DistributedSampler`` repeats some pairs so that every process gets as many; a
  repeated pair is counted once, with the score of its first row in the gathered order (the
  lowest rank's), as `common.metrics.RankingMetrics` counts it: on a GPU a pair's score may
  depend on the batch it was scored in, so the two must choose the same row.
- The re-ranked run keeps every candidate: the scored ones by their new scores, then each
  query's candidates that were not scored (below the depth) in their first-stage order, under
  the lowest new score, so that measures deeper than the depth see the first stage there.
- `RerankPairs` is the evaluation dataset of every package: the pairs in order of document
  length (batches pad little), item = position, and a `collate` that encodes a batch with the
  package's own ``encode(query texts, documents) -> dict`` and adds ``qids``, ``doc_ids`` and
  ``index`` (the positions, for the (index, score) rows).
"""

from __future__ import annotations

from collections.abc import Callable

import lightning as L
import torch
from torch import Tensor
from torch.utils.data import Dataset

from common.data.formats import Document, Run, Topics, ranked, with_unscored_below

#: A package's batch encoder: the query texts and documents of a batch's pairs -> the model's inputs.
Encode = Callable[[list[str], list[Document]], dict]


def rerank_pairs(candidates: Run, depth: int, queries: list[str] | None = None) -> list[tuple[str, str]]:
    """Each query's top-`depth` candidates in trec_eval's order, as (qid, docid) pairs.

    `queries` chooses the queries and their order (default: every query of `candidates`, sorted).
    """
    qids = sorted(candidates) if queries is None else queries
    return [(qid, doc_id) for qid in qids for doc_id, _ in ranked(candidates[qid])[:depth]]


def reranked_run(pairs: list[tuple[str, str]], scores: Tensor, candidates: Run) -> Run:
    """The run of the scored `pairs` ((index, score) rows of `scores`), each query's unscored candidates below
    (`common.metrics.ordering.with_unscored_below`).

    The rows are read in the order of `pairs`, whatever order the processes that scored them gathered them in: the
    queries come in the same order, and the run is written the same, on any number of processes. A pair a padded
    sampler repeated keeps the score of its first row in `scores` (module docstring)."""
    rows = scores.tolist()
    run: Run = {}
    for index, score in sorted(rows, key=lambda row: row[0]):  # stable: a repeated pair's rows in gathered order
        qid, doc_id = pairs[int(index)]
        run.setdefault(qid, {}).setdefault(doc_id, float(score))
    return with_unscored_below(run, candidates)


def gather_scores(module: L.LightningModule, rows: list[Tensor]) -> Tensor:
    """Every process's (index, score) `rows` (each a (B, 2) tensor) as one float64 (N, 2) CPU tensor.

    Call it in every process (it is a collective: ``LightningModule.all_gather``), e.g. in
    ``on_test_epoch_end``; a process that scored nothing passes an empty list. The processes must
    hold as many rows each, as a padded ``DistributedSampler`` makes them.
    """
    local = torch.cat(rows) if rows else torch.zeros(0, 2, dtype=torch.float64, device=module.device)
    gathered = module.all_gather(local)  # (world, K, 2) or (K, 2)
    return gathered.reshape(-1, 2).double().cpu()


class RerankPairs(Dataset):
    """(query, candidate) pairs to score, in order of document length; item = position in `pairs`.

    Args:
        pairs: (qid, docid) pairs (`rerank_pairs`); kept in `pairs` sorted by the length of the
            document's title and text (characters), then by the pair.
        topics: query text by qid.
        documents: a `common.data.source.DocumentLookup` (``get_many``).
        encode: ``encode(query texts, documents) -> dict`` of model inputs; it goes to loader
            workers with the dataset, so it must pickle (a module-level function, a
            ``functools.partial`` of one, or an object).

    ``collate(indices)`` returns ``encode(...)`` with ``qids``, ``doc_ids`` (lists) and ``index``
    (a tensor of the positions) added.
    """

    def __init__(self, pairs: list[tuple[str, str]], topics: Topics, documents, encode: Encode):
        self.topics, self.documents, self.encode = topics, documents, encode
        lengths = {}
        doc_ids = sorted({d for _, d in pairs})
        for start in range(0, len(doc_ids), 1000):
            for doc in documents.get_many(doc_ids[start : start + 1000]):
                lengths[doc.doc_id] = len(doc.title) + len(doc.text)
        self.pairs = sorted(pairs, key=lambda pair: (lengths[pair[1]], pair))

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, index: int) -> int:
        return index

    def collate(self, indices: list[int]) -> dict:
        qids = [self.pairs[i][0] for i in indices]
        doc_ids = [self.pairs[i][1] for i in indices]
        batch = self.encode([self.topics[q] for q in qids], self.documents.get_many(doc_ids))
        return batch | {"qids": qids, "doc_ids": doc_ids, "index": torch.tensor(indices)}
