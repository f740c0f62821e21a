"""Normalised cumulative gain, as reported for TREC DL 2020 in the Conformer-Kernel paper."""

from __future__ import annotations

from collections.abc import Sequence


def ncg(gains: Sequence[int], judged: Sequence[int], k: int) -> float:
    """NCG@k (Rosset et al., SIGIR 2018; Mitra et al.'s NCG@100): the sum of max(label, 0) over the top k over the
    same sum for the k highest labels of the qrels, no rank discount."""
    ideal = sum(sorted(judged, reverse=True)[:k])
    return sum(gains[:k]) / ideal
