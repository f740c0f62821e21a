"""Per-query values of the gain measures (gdeval nDCG/ERR, NCG) and the queries they count.

A query counts when it has a label > 0 (gdeval.pl's ``%seen``; "queries
having a label > 0" in the NCG reference). gdeval measures first move every
query to its gdeval topic id (`gdeval.gdeval_topic`) and order topics
numerically; NCG keeps qids and orders them as trec_eval does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from common.metrics.gdeval import check_gdeval_labels, gdeval_topic, gdeval_topic_order
from common.metrics.ordering import exact_ranking
from common.metrics.registry import GainRequest

T = TypeVar("T")


def gain_per_query(
    qrels: Mapping[str, Mapping[str, int]],
    run: Mapping[str, Mapping[str, float]],
    request: GainRequest,
    *,
    depth: int | None,
) -> tuple[dict[str, float], list[str]]:
    """``({query: value}, [counted queries absent from the run])``, both in the measure's query order.

    The ranking is cut at ``min(k, depth)``; the ideal always uses k.
    """
    measure, k = request.measure, request.k
    if measure.gdeval_topics:
        check_gdeval_labels(qrels)
        qrels, run = by_gdeval_topic(qrels, run)
        order = gdeval_topic_order
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


def by_gdeval_topic(
    qrels: Mapping[str, Mapping[str, int]], run: Mapping[str, Mapping[str, float]]
) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, float]]]:
    """Qrels and run keyed by gdeval topic id; queries that gdeval.pl merges are merged.

    Two qids with the same topic id (``2023-5``, ``2024-5``) become one topic,
    as in gdeval.pl. What gdeval.pl would do with a document judged or
    retrieved under both, or with ids equal only as numbers (``05``, ``5``),
    depends on its input order, so those raise ValueError instead.
    """
    merged_qrels, merged_run = _merge_by_topic(qrels), _merge_by_topic(run)
    numbers: dict[int, str] = {}
    for topic in merged_qrels.keys() | merged_run.keys():
        if numbers.setdefault(gdeval_topic_order(topic), topic) != topic:
            raise ValueError(f"gdeval topic ids {topic!r} and {numbers[int(topic)]!r} are the same number")
    return merged_qrels, merged_run


def _merge_by_topic(table: Mapping[str, Mapping[str, T]]) -> dict[str, dict[str, T]]:
    merged: dict[str, dict[str, T]] = {}
    for qid, docs in table.items():
        target = merged.setdefault(gdeval_topic(qid), {})
        shared = target.keys() & docs.keys()
        if shared:
            raise ValueError(f"gdeval topic {gdeval_topic(qid)!r} merges queries that share document {min(shared)!r}")
        target.update(docs)
    return merged
