"""Per-query values of the gain measures (gdeval nDCG/ERR, NCG) and the queries they count: those with a label > 0
(gdeval.pl's ``%seen``); gdeval measures key queries by gdeval topic id, ordered numerically.
"""

from __future__ import annotations

from collections.abc import Mapping

from common.metrics.gdeval import check_gdeval_labels, gdeval_topic
from common.metrics.ordering import exact_ranking
from common.metrics.registry import GainRequest


def gain_per_query(qrels: Mapping[str, Mapping[str, int]], run: Mapping[str, Mapping[str, float]], request: GainRequest,
                   *, depth: int | None) -> tuple[dict[str, float], list[str]]:
    """``({query: value}, [counted queries absent from the run])``; the ranking cut at ``min(k, depth)``, ideal at k."""
    measure, k = request.measure, request.k
    if measure.gdeval_topics:
        check_gdeval_labels(qrels)
        qrels, run = by_gdeval_topic(qrels, run)
        order = int  # gdeval.pl orders and groups topics numerically
    else:
        order = str
    judged = {qid: [label for label in labels.values() if label > 0] for qid, labels in qrels.items()}
    counted = {qid for qid, labels in judged.items() if labels}
    cut = k if depth is None else min(k, depth)

    values: dict[str, float] = {}
    for qid in sorted(counted & run.keys(), key=order):
        labels = qrels[qid]
        gains = [max(labels.get(doc, 0), 0) for doc in exact_ranking(run[qid])[:cut]]
        values[qid] = measure.compute(gains, judged[qid], k)
    return values, sorted(counted - run.keys(), key=order)


def by_gdeval_topic(qrels: Mapping[str, Mapping[str, int]], run: Mapping[str, Mapping[str, float]]
                    ) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, float]]]:
    """Qrels and run keyed by gdeval topic id, merged as gdeval.pl merges them; ValueError where its result would
    depend on input order (a document under both ids, ids equal only as numbers)."""
    merged_qrels, merged_run = _merge_by_topic(qrels), _merge_by_topic(run)
    numbers: dict[int, str] = {}
    for topic in merged_qrels.keys() | merged_run.keys():
        if numbers.setdefault(int(topic), topic) != topic:
            raise ValueError(f"gdeval topic ids {topic!r} and {numbers[int(topic)]!r} are the same number")
    return merged_qrels, merged_run


def _merge_by_topic(table: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    merged: dict[str, dict[str, float]] = {}
    for qid, docs in table.items():
        target = merged.setdefault(gdeval_topic(qid), {})
        shared = target.keys() & docs.keys()
        if shared:
            raise ValueError(f"gdeval topic {gdeval_topic(qid)!r} merges queries that share document {min(shared)!r}")
        target.update(docs)
    return merged
