"""Per-query values as a pandas DataFrame, for inspection and significance tests."""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from common.metrics.evaluation import Qrels, Run, evaluate
from common.metrics.registry import DEFAULT_MEASURES

COLUMNS = ("qid", "measure", "value")


def per_query(
    qrels: Qrels,
    run: Run,
    measures: str | Iterable[str] = DEFAULT_MEASURES,
    *,
    relevance_level: int = 1,
    complete: bool = False,
    depth: int | None = None,
) -> pd.DataFrame:
    """One row per (query, measure), columns ``qid, measure, value``, in request and tool order; with ``complete``
    the qrels queries the run lacks too, with the value the summary averages in for them."""
    results = evaluate(qrels, run, measures, relevance_level=relevance_level, complete=complete, depth=depth)
    rows = [
        (qid, name, value)
        for name, result in results.items()
        for qid, value in (*result.values.items(), *result.missing.items())
    ]
    return pd.DataFrame(rows, columns=list(COLUMNS)).astype({"qid": str, "measure": str, "value": float})
