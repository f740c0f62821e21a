"""Per-query values of ir_measures' ``RR@K``: MS MARCO's MRR@K as ir_measures computes it.

ir_measures 0.4.3 hands ``RR`` with a cutoff to its ``msmarco`` provider (pytrec_eval's takes none), which runs
MS MARCO's ``compute_metrics``: a query's documents ranked by score descending and then docid ascending
(`common.metrics.ordering.msmarco_ranking`; trec_eval breaks ties by docid descending, so ``mrr@K`` can differ
where scores tie), the reciprocal rank of the first one labelled at least the relevance level within the top K,
else 0. Every query of the qrels is counted, one absent from the run with 0 (`common.metrics.evaluation`).
"""

from __future__ import annotations

from collections.abc import Mapping

from common.metrics.ordering import msmarco_ranking
from common.metrics.registry import MsMarcoRRRequest


def msmarco_rr_per_query(
    qrels: Mapping[str, Mapping[str, int]],
    run: Mapping[str, Mapping[str, float]],
    request: MsMarcoRRRequest,
    *,
    depth: int | None,
) -> dict[str, float]:
    """``{qid: value}`` for the queries in both run and qrels, in trec_eval's query order; cut at ``min(k, depth)``."""
    cut = request.k if depth is None else min(request.k, depth)
    values = {}
    for qid in sorted(run.keys() & qrels.keys()):
        relevant = {doc for doc, label in qrels[qid].items() if label >= request.relevance_level}
        top = msmarco_ranking(run[qid])[:cut]
        values[qid] = next((1.0 / rank for rank, doc in enumerate(top, start=1) if doc in relevant), 0.0)
    return values
