"""Scoring a task's pairs one query at a time, as a ranker reading precomputed representations does online, and
measuring how far a store's scores are from end-to-end ones. A scorer is ``scorer(query text, doc ids) -> (n,)
float64``; `StoreScorer` reads a representation store, or computes the rows end to end with the same code, a paper's
subclass saying how queries are encoded and documents scored (`earl.query_scorer`, `mva.query_scorer`).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Iterable, Sequence

import torch
from torch import Tensor

#: A query's scorer: (query text, its candidates' doc ids) -> their scores.
Scorer = Callable[[str, Sequence[str]], Tensor]


def load_module(cls, state: dict):
    """The `cls` LightningModule of checkpoint contents `state`, in eval mode on the CPU."""
    names = set(inspect.signature(cls.__init__).parameters) - {"self"}
    module = cls(**{k: v for k, v in state["hyper_parameters"].items() if k in names})
    module.load_state_dict(state["state_dict"])
    return module.eval()


class StoreScorer:

    def __init__(self, encoder, *, width: int | None, width_name: str = "width", batch_size: int,
                 device: torch.device | str = "cpu", store=None, documents=None):
        if store is None and documents is None:
            raise ValueError("give a store, or the documents to encode end to end")
        if store is not None and store.width != width:
            raise ValueError(f"{store.folder}: rows of width {store.width}, not the {width_name} {width} of this "
                             "model")
        self.encoder, self.store, self.documents = encoder, store, documents
        self.batch_size, self.device = batch_size, torch.device(device)
        self.seconds = 0.0

    @property
    def label(self) -> str:
        if self.store is None:
            return "end to end"
        return f"{self.store.identity['strategy'].upper()} store ({self.store.dtype})"

    @torch.inference_mode()
    def __call__(self, query: str, doc_ids: Sequence[str]) -> Tensor:
        """Scores (len(doc_ids),), float64 on the CPU, of the candidates `doc_ids` for query text `query`."""
        start = time.perf_counter()
        encoded = self.encoder.queries([query])
        query_encoding = self.encode_query(encoded["query_tokens"].to(self.device),
                                           encoded["query_mask"].to(self.device))
        scores = []
        for first in range(0, len(doc_ids), self.batch_size):
            rows, keep = self.rows(list(doc_ids[first : first + self.batch_size]))
            scores.append(self.score(query_encoding, rows, keep).double().cpu())
        self.seconds += time.perf_counter() - start
        return torch.cat(scores) if scores else torch.zeros(0, dtype=torch.float64)

    def rows(self, doc_ids: list[str]) -> tuple[Tensor, Tensor]:
        """The candidates' rows and keep mask: from the store, or computed end to end."""
        if self.store is None:
            batch = self.encoder.documents(self.documents.get_many(doc_ids))
            return self.document_rows(batch["doc_tokens"].to(self.device), batch["doc_mask"].to(self.device))
        rows, mask = self.store.padded(doc_ids)
        return self.stored_rows(rows.to(self.device), mask.to(self.device))

    def stored_rows(self, rows: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """What ``score`` reads of a store's (B, d, width) `rows` and (B, d) `mask`: the rows as they are."""
        return rows, mask


def score_pairs(scorer: Scorer, pairs: Sequence[tuple[str, str]], topics,
                progress: Callable[[Iterable], Iterable] | None = None) -> Tensor:
    """(index, score) rows of every (qid, docid) pair, each query's candidates scored together."""
    by_query: dict[str, list[int]] = {}
    for i, (qid, _) in enumerate(pairs):
        by_query.setdefault(qid, []).append(i)
    rows = []
    for qid, positions in (progress or iter)(by_query.items()):
        scores = scorer(topics[qid], [pairs[i][1] for i in positions])
        rows.append(torch.stack([torch.tensor(positions, dtype=torch.float64), scores], 1))
    return torch.cat(rows) if rows else torch.zeros(0, 2, dtype=torch.float64)


def compare_scores(scores: Tensor, reference: Tensor, pairs: Sequence[tuple[str, str]], metrics: dict | None,
                   reference_metrics: dict | None) -> dict:
    """How far `scores` (from a store) are from `reference` (end to end) on the same `pairs`."""
    a = scores[scores[:, 0].argsort()]
    b = reference[reference[:, 0].argsort()]
    if not torch.equal(a[:, 0], b[:, 0]):
        raise ValueError("the two score sets are not of the same pairs")
    difference = (a[:, 1] - b[:, 1]).abs()
    orders: dict[str, tuple[dict, dict]] = {}  # qid -> each side's scores by doc id
    for (i, x), y in zip(a.tolist(), b[:, 1].tolist()):
        qid, doc_id = pairs[int(i)]
        mine, theirs = orders.setdefault(qid, ({}, {}))
        mine[doc_id], theirs[doc_id] = x, y
    reordered = sorted(qid for qid, (mine, theirs) in orders.items() if _order(mine) != _order(theirs))
    report = {"pairs": len(a), "queries": len(orders),
              "max_abs_score_difference": float(difference.max()) if len(a) else 0.0,
              "mean_abs_score_difference": float(difference.mean()) if len(a) else 0.0,
              "queries_reordered": len(reordered), "reordered_queries": reordered[:20]}
    if metrics is None or reference_metrics is None:
        return report
    ndcg, reference_ndcg = metrics["ndcg_cut_10"], reference_metrics["ndcg_cut_10"]
    return {**report, "ndcg_cut_10": ndcg, "end_to_end_ndcg_cut_10": reference_ndcg,
            "ndcg_cut_10_change": ndcg - reference_ndcg}


def _order(scores: dict[str, float]) -> list[str]:
    from common.data.formats import ranked

    return [doc_id for doc_id, _ in ranked(scores)]


def exactness_line(label: str, report: dict) -> str:
    reordered = report["queries_reordered"]
    order = "the same order for every query" if not reordered else f"{reordered} queries in another order"
    ndcg = (f"; NDCG@10 {report['ndcg_cut_10']:.4f} vs {report['end_to_end_ndcg_cut_10']:.4f} (change "
            f"{report['ndcg_cut_10_change']:+.4g})" if "ndcg_cut_10" in report else "")
    return (f"{label} vs end to end, {report['pairs']:,} pairs of {report['queries']:,} queries: largest |score "
            f"difference| {report['max_abs_score_difference']:.3g} (mean {report['mean_abs_score_difference']:.3g}); "
            f"{order}{ndcg}")
