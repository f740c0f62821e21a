"""Scoring a task's (query, candidate) pairs one query at a time, as a ranker reading precomputed representations
does online, and measuring how far a store's scores are from end-to-end ones (EARL's ``earl.evaluate``, MVA's
``mva.evaluate``).

A scorer is any ``scorer(query text, doc ids) -> (len(doc ids),) float64 scores`` that encodes the query once
(`earl.store.QueryScorer`, `mva.store.QueryScorer`). Scores travel as `common.data.rerank`'s (index, score) rows.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

#: A query's scorer: (query text, its candidates' doc ids) -> their scores.
Scorer = Callable[[str, Sequence[str]], Tensor]


def load_module(cls, state: dict):
    """The `cls` LightningModule of checkpoint contents `state`, in eval mode on the CPU: built from its saved
    hyper-parameters (those ``cls.__init__`` takes) and loaded with its weights, without reading the file again."""
    names = set(inspect.signature(cls.__init__).parameters) - {"self"}
    module = cls(**{k: v for k, v in state["hyper_parameters"].items() if k in names})
    module.load_state_dict(state["state_dict"])
    return module.eval()


def score_pairs(scorer: Scorer, pairs: Sequence[tuple[str, str]], topics) -> Tensor:
    """(index, score) rows (`common.data.rerank`) of every (qid, docid) pair, each query's candidates scored together
    (its query encoded once)."""
    by_query: dict[str, list[int]] = {}
    for i, (qid, _) in enumerate(pairs):
        by_query.setdefault(qid, []).append(i)
    rows = []
    for qid, positions in by_query.items():
        scores = scorer(topics[qid], [pairs[i][1] for i in positions])
        rows.append(torch.stack([torch.tensor(positions, dtype=torch.float64), scores], 1))
    return torch.cat(rows) if rows else torch.zeros(0, 2, dtype=torch.float64)


def compare_scores(scores: Tensor, reference: Tensor, pairs: Sequence[tuple[str, str]], metrics: dict,
                   reference_metrics: dict) -> dict:  # fmt: skip
    """How far `scores` (from a store) are from `reference` (end to end) on the same `pairs`: the largest and the
    mean absolute score difference, the queries whose re-ranked order differs, and the NDCG@10 change
    (`metrics` and `reference_metrics`: each run's measures)."""
    a = scores[scores[:, 0].argsort()]
    b = reference[reference[:, 0].argsort()]
    if not torch.equal(a[:, 0], b[:, 0]):
        raise ValueError("the two score sets are not of the same pairs")
    difference = (a[:, 1] - b[:, 1]).abs()
    orders: dict[str, list[list]] = {}
    for (i, x), y in zip(a.tolist(), b[:, 1].tolist()):
        qid, doc_id = pairs[int(i)]
        orders.setdefault(qid, [[], []])
        orders[qid][0].append((x, doc_id))
        orders[qid][1].append((y, doc_id))
    reordered = sorted(qid for qid, (mine, theirs) in orders.items() if _order(mine) != _order(theirs))
    ndcg, reference_ndcg = metrics["ndcg_cut_10"], reference_metrics["ndcg_cut_10"]
    return {"pairs": len(a), "queries": len(orders),
            "max_abs_score_difference": float(difference.max()) if len(a) else 0.0,
            "mean_abs_score_difference": float(difference.mean()) if len(a) else 0.0,
            "queries_reordered": len(reordered), "reordered_queries": reordered[:20],
            "ndcg_cut_10": ndcg, "end_to_end_ndcg_cut_10": reference_ndcg, "ndcg_cut_10_change": ndcg - reference_ndcg}


def _order(scored: list[tuple[float, str]]) -> list[str]:
    from common.data.formats import ranked

    return [doc_id for doc_id, _ in ranked({doc_id: score for score, doc_id in scored})]


def exactness_line(label: str, report: dict) -> str:
    """`compare_scores`' report in one line."""
    reordered = report["queries_reordered"]
    order = "the same order for every query" if not reordered else f"{reordered} queries in another order"
    return (f"{label} vs end to end, {report['pairs']:,} pairs of {report['queries']:,} queries: largest |score "
            f"difference| {report['max_abs_score_difference']:.3g} (mean {report['mean_abs_score_difference']:.3g}); "
            f"{order}; NDCG@10 {report['ndcg_cut_10']:.4f} vs {report['end_to_end_ndcg_cut_10']:.4f} (change "
            f"{report['ndcg_cut_10_change']:+.4g})")
