"""Paired significance test between two runs, as the reproduced papers report it."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
from scipy import stats


@dataclass(frozen=True)
class PairedTTest:
    measure: str
    queries: int
    mean_a: float
    mean_b: float
    statistic: float  # t; positive when run a scores higher
    pvalue: float


def paired_ttest(scores_a: pd.DataFrame, scores_b: pd.DataFrame, measure: str, *,
                 alternative: str = "two-sided") -> PairedTTest:
    """Student's paired t-test (scipy.stats.ttest_rel) of two `per_query` frames over the same queries on one
    measure; NaN p-value where every difference is 0."""
    a, b = _values(scores_a, measure, "a"), _values(scores_b, measure, "b")
    if set(a.index) != set(b.index):
        only_a, only_b = sorted(set(a.index) - set(b.index)), sorted(set(b.index) - set(a.index))
        raise ValueError(f"{measure}: the runs cover different queries (only in a: {only_a[:5]}, only in b: "
                         f"{only_b[:5]}); evaluate both with complete=True")
    b = b.reindex(a.index)
    result = stats.ttest_rel(a.to_numpy(), b.to_numpy(), alternative=alternative)
    return PairedTTest(measure, len(a), float(a.mean()), float(b.mean()), float(result.statistic), float(result.pvalue))


def _values(scores: pd.DataFrame, measure: str, which: str) -> pd.Series:
    values = scores.loc[scores["measure"] == measure].set_index("qid")["value"]
    if values.empty:
        raise ValueError(f"run {which} has no per-query values for {measure!r}")
    if values.index.has_duplicates:
        raise ValueError(f"run {which} has several values per query for {measure!r}")
    return values
