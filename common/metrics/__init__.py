"""Ranking evaluation that matches trec_eval 9.0.8 and gdeval.pl 1.3 to their printed digits.

API
---
``evaluate_run(qrels, run, measures=DEFAULT_MEASURES, *, relevance_level=1,
complete=False, depth=None) -> dict[str, float]``
    Summary value per measure (trec_eval's ``all`` line, gdeval's ``amean``).
``evaluate(...) -> dict[str, MeasureResult]``
    The same with per-query values and the printing precision.
``per_query(...) -> pandas.DataFrame``
    Long layout, columns ``qid, measure, value``.
``paired_ttest(scores_a, scores_b, measure) -> PairedTTest``
    Student's paired t-test on two `per_query` frames.
``RankingMetrics(qrels, measures, ...)``
    torchmetrics Metric over (qid, docid, score) updates, DDP-synchronised.
``parse_measures(names)``, ``DEFAULT_MEASURES``, ``TREC_EVAL_MEASURES``, ``GAIN_MEASURES``
    The measure registry.

``qrels`` is ``{qid: {docid: label}}`` and ``run`` ``{qid: {docid: score}}``
(`common.data.formats.read_qrels` / ``read_run``, the layout pytrec_eval
uses). Measure names, ``relevance_level`` (``-l``), ``complete`` (``-c``) and
``depth`` (``-M``) are trec_eval's, and ir_measures' names (``nDCG@10``,
``RR(rel=2)@10``) are taken too; see `common.metrics.registry` and
`common.metrics.evaluation`. ``python -m common.evaluate`` is the command line.

`per_query`, `paired_ttest` and `RankingMetrics` load pandas, scipy and
torchmetrics on first use, which keeps the command line quick to start.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from common.metrics.evaluation import MeasureResult, evaluate, evaluate_run
from common.metrics.registry import DEFAULT_MEASURES, GAIN_MEASURES, parse_measures
from common.metrics.trec_eval_measures import TREC_EVAL_MEASURES, Aggregation

if TYPE_CHECKING:
    from common.metrics.per_query_table import per_query
    from common.metrics.ranking_metric import RankingMetrics
    from common.metrics.significance import PairedTTest, paired_ttest

_LAZY = {
    "per_query": "common.metrics.per_query_table",
    "paired_ttest": "common.metrics.significance",
    "PairedTTest": "common.metrics.significance",
    "RankingMetrics": "common.metrics.ranking_metric",
}

__all__ = [
    "DEFAULT_MEASURES", "GAIN_MEASURES", "TREC_EVAL_MEASURES", "Aggregation", "MeasureResult", "PairedTTest",
    "RankingMetrics", "evaluate", "evaluate_run", "paired_ttest", "parse_measures", "per_query",
]  # fmt: skip


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
