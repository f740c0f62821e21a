"""Per-query values of ir_measures' ``RR@K`` (ir_measures 0.4.3's ``msmarco`` provider, MS MARCO's ``compute_metrics``):
documents ranked by score descending, then docid ascending (trec_eval's ``mrr@K`` breaks ties the other way), the
reciprocal rank of the first relevant one in the top K, else 0.
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
