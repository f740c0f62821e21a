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
    """One row per (query, measure), long layout with columns ``qid, measure, value``.

    Rows follow the measures in request order, each measure's queries in the
    order its tool prints them. With ``complete`` the qrels queries missing
    from the run are included with the value the summary averages in for them
    (0 for most measures), so that two runs are compared on the same queries.
    gdeval measures use gdeval topic ids and gm_* measures ln(max(v, 1e-5))
    (see `common.metrics.trec_eval_measures`). For a wide table:
    ``df.pivot(index="qid", columns="measure", values="value")``.
    """
    results = evaluate(qrels, run, measures, relevance_level=relevance_level, complete=complete, depth=depth)
    rows = [
        (qid, name, value)
        for name, result in results.items()
        for qid, value in (*result.values.items(), *result.missing.items())
    ]
    return pd.DataFrame(rows, columns=list(COLUMNS)).astype({"qid": str, "measure": str, "value": float})
