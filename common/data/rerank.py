"""Re-ranking a first-stage candidate run: each query's top-`depth` candidates in trec_eval's order, their scores as
float64 (index, score) rows gathered from every process (`gather_scores`; a pair a padded sampler repeats counts once,
its first row's), and the run made of them, candidates below the depth following under the lowest score
(`reranked_run`). `RerankPairs` is every package's evaluation dataset.
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
    """Each query's top-`depth` candidates in trec_eval's order, as (qid, docid) pairs."""
    qids = sorted(candidates) if queries is None else queries
    return [(qid, doc_id) for qid in qids for doc_id, _ in ranked(candidates[qid])[:depth]]


def reranked_run(pairs: list[tuple[str, str]], scores: Tensor, candidates: Run) -> Run:
    """The run of the scored `pairs`, each query's unscored candidates below."""
    rows = scores.tolist()
    run: Run = {}
    for index, score in sorted(rows, key=lambda row: row[0]):
        qid, doc_id = pairs[int(index)]
        run.setdefault(qid, {}).setdefault(doc_id, float(score))
    return with_unscored_below(run, candidates)


def gather_scores(module: L.LightningModule, rows: list[Tensor]) -> Tensor:
    """Every process's (index, score) `rows` (each a (B, 2) tensor) as one float64 (N, 2) CPU tensor."""
    local = torch.cat(rows) if rows else torch.zeros(0, 2, dtype=torch.float64, device=module.device)
    gathered = module.all_gather(local)  # (world, K, 2) or (K, 2)
    return gathered.reshape(-1, 2).double().cpu()


class RerankPairs(Dataset):
    """(query, candidate) pairs to score, sorted by document length (title and text characters), then pair; item =
    position. ``encode(query texts, documents) -> dict`` goes to loader workers, so it must pickle; ``collate`` adds
    ``qids``, ``doc_ids`` and ``index``."""

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
