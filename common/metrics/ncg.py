"""Normalised cumulative gain, as reported for TREC DL 2020 in the Conformer-Kernel paper."""

from __future__ import annotations

from collections.abc import Sequence


def ncg(gains: Sequence[int], judged: Sequence[int], k: int) -> float:
    """NCG@k: cumulative gain of the top k over that of the ideal top k.

    Rosset et al., "Optimizing query evaluations using reinforcement learning
    for web search", SIGIR 2018, as used by Mitra et al. (Conformer-Kernel,
    TREC DL 2020, NCG@100): gain = relevance label (linear, negatives count
    0), no rank discount. The ideal is the k highest labels in the qrels.
    This is the definition behind KEY_METRICS.tsv's NCG@100 reference values:
    sum of max(label, 0) over the top 100 (score desc, docno desc) / the same
    sum for the ideal top 100, averaged over queries with a label > 0.
    """
    ideal = sum(sorted(judged, reverse=True)[:k])
    return sum(gains[:k]) / ideal
