"""Ranking evaluation matching trec_eval 9.0.8 and gdeval.pl 1.3 to their printed digits: `evaluate_run` (a value per
measure), `evaluate` (with per-query values), `per_query`, `paired_ttest`, `RankingMetrics` (a DDP-synchronised
torchmetrics Metric) and the measure registry. ``qrels`` is ``{qid: {docid: label}}``, ``run`` ``{qid: {docid:
score}}``; ``relevance_level``, ``complete`` and ``depth`` are trec_eval's ``-l``, ``-c`` and ``-M``. pandas, scipy and
torchmetrics load on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from common.metrics.evaluation import MeasureResult, evaluate, evaluate_run, per_query
from common.metrics.registry import DEFAULT_MEASURES, GAIN_MEASURES, parse_measures
from common.metrics.trec_eval_measures import TREC_EVAL_MEASURES, Aggregation

if TYPE_CHECKING:
    from common.metrics.ranking_metric import RankingMetrics
    from common.metrics.significance import PairedTTest, paired_ttest

_LAZY = {"paired_ttest": "common.metrics.significance", "PairedTTest": "common.metrics.significance",
         "RankingMetrics": "common.metrics.ranking_metric"}

__all__ = [
    "DEFAULT_MEASURES", "GAIN_MEASURES", "TREC_EVAL_MEASURES", "Aggregation", "MeasureResult", "PairedTTest",
    "RankingMetrics", "evaluate", "evaluate_run", "paired_ttest", "parse_measures", "per_query",
]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
