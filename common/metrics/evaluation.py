"""Evaluate a run against qrels: per-query values and summaries, as trec_eval 9.0.8 and gdeval.pl report them.

``relevance_level`` (``-l``) is the lowest label the binary trec_eval measures count relevant (gdeval and NCG ignore
it); ``complete`` (``-c``) averages over every qrels query, a query the run lacks adding its default (gdeval.pl and
NCG: the qrels queries with a label > 0); without it, over the queries of both; ``depth`` (``-M``) keeps each query's
top documents in trec_eval's order. ir_measures' names carry their own level and always average over every qrels
query. trec_eval's fatal "no queries with both results and relevance info" is a ValueError; gdeval.pl's 0 stays 0.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from common.metrics.gain_backend import gain_per_query
from common.metrics.ordering import msmarco_ranking
from common.metrics.pytrec_eval_backend import request_names, trec_eval_per_query
from common.metrics.registry import (DEFAULT_MEASURES, TREC_EVAL_DIGITS, GainRequest, MeasureRequest, MsMarcoRRRequest,
                                     TrecEvalRequest, parse_measures)
from common.metrics.trec_eval_measures import MIN_GEO_MEAN, Aggregation

if TYPE_CHECKING:
    import pandas as pd

# Read-only views of common.data.formats.Qrels / Run (the layout pytrec_eval takes).
Qrels = Mapping[str, Mapping[str, int]]
Run = Mapping[str, Mapping[str, float]]
#: The columns of `per_query`'s frame.
COLUMNS = ("qid", "measure", "value")


@dataclass(frozen=True)
class MeasureResult:
    """One measure on one run: ``values`` per query evaluated, in the tool's order, ``missing`` (with ``complete``)
    the counted queries absent from the run, and the summary the tool prints."""

    name: str
    values: dict[str, float]
    missing: dict[str, float]
    aggregation: Aggregation
    digits: int

    @functools.cached_property
    def summary(self) -> float:
        """The summary, added left to right in query order as the tools do (Python 3.12's sum() compensates)."""
        count = len(self.values) + len(self.missing)
        total = functools.reduce(operator.add, self.values.values(), 0.0)
        if self.aggregation is Aggregation.GEOMETRIC:
            # meas_avg.c adds the absent queries' log(MIN_GEO_MEAN) as one product.
            total += len(self.missing) * math.log(MIN_GEO_MEAN)
            return math.exp(total / count) if count else 0.0
        total = functools.reduce(operator.add, self.missing.values(), total)
        if self.aggregation is Aggregation.SUM:
            return total
        return total / count if count else 0.0

    @property
    def printed_per_query(self) -> bool:
        """trec_eval 9.0.8 prints no per-query line for num_q and the geometric means."""
        return self.name != "num_q" and self.aggregation is not Aggregation.GEOMETRIC

    def format(self, value: float) -> str:
        """`value` as the tool prints it: counts as integers, else `digits` decimals."""
        if self.aggregation is Aggregation.SUM:
            return str(int(value))
        return f"{value:.{self.digits}f}"


def evaluate(qrels: Qrels, run: Run, measures: str | Iterable[str] = DEFAULT_MEASURES, *, relevance_level: int = 1,
             complete: bool = False, depth: int | None = None) -> dict[str, MeasureResult]:
    """Every requested measure's `MeasureResult`, keyed by printed name, in request order."""
    requests = parse_measures([measures] if isinstance(measures, str) else measures)
    if depth is not None and depth < 1:
        raise ValueError(f"depth must be a positive number of documents, got {depth}")
    # trec_eval never sees a query without documents or judgments: its files have none.
    run = {qid: docs for qid, docs in run.items() if docs}
    qrels = {qid: labels for qid, labels in qrels.items() if labels}
    trec_eval_requests = [r for r in requests if isinstance(r, TrecEvalRequest)]
    if any(not isinstance(r, GainRequest) for r in requests) and not run.keys() & qrels.keys():
        raise ValueError("no query has both results and relevance judgments")
    trec_eval_values = trec_eval_per_query(qrels, run, trec_eval_requests, relevance_level=relevance_level, depth=depth)

    results: dict[str, MeasureResult] = {}
    for request in requests:
        for name, result in _results(request, qrels, run, trec_eval_values, relevance_level, complete, depth):
            results.setdefault(name, result)
    return results


def _results(request: MeasureRequest, qrels: Qrels, run: Run, trec_eval_values: dict[str, dict[str, float]],
             relevance_level: int, complete: bool, depth: int | None) -> list[tuple[str, MeasureResult]]:
    if isinstance(request, GainRequest):
        values, absent_topics = gain_per_query(qrels, run, request, depth=depth)
        missing = dict.fromkeys(absent_topics, 0.0) if complete else {}
        return [(request.name, MeasureResult(request.name, values, missing, Aggregation.MEAN, request.measure.digits))]
    absent = sorted(qrels.keys() - run.keys())
    if isinstance(request, MsMarcoRRRequest):
        missing = dict.fromkeys(absent, 0.0)
        values = _msmarco_rr(qrels, run, request, depth)
        return [(request.name, MeasureResult(request.name, values, missing, Aggregation.MEAN, TREC_EVAL_DIGITS))]
    measure = request.measure
    level = relevance_level if request.relevance_level is None else request.relevance_level
    counted = absent if complete or request.complete else []
    missing = {qid: measure.missing_value(qrels[qid], level) for qid in counted}
    return [(name, MeasureResult(name, trec_eval_values[name], missing, measure.aggregation, TREC_EVAL_DIGITS))
            for name in request_names(request)]


def _msmarco_rr(qrels: Qrels, run: Run, request: MsMarcoRRRequest, depth: int | None) -> dict[str, float]:
    """ir_measures' ``RR@K`` (MS MARCO's ``compute_metrics``) for the queries of both, in trec_eval's query order: the
    reciprocal rank of the first relevant document in the top ``min(k, depth)``, ties by docid ascending, else 0."""
    cut = request.k if depth is None else min(request.k, depth)
    values = {}
    for qid in sorted(run.keys() & qrels.keys()):
        relevant = {doc for doc, label in qrels[qid].items() if label >= request.relevance_level}
        top = msmarco_ranking(run[qid])[:cut]
        values[qid] = next((1.0 / rank for rank, doc in enumerate(top, start=1) if doc in relevant), 0.0)
    return values


def evaluate_run(qrels: Qrels, run: Run, measures: str | Iterable[str] = DEFAULT_MEASURES,
                 **options) -> dict[str, float]:
    """``{measure: summary value}`` (trec_eval's ``all``, gdeval's ``amean``), unrounded; `options`: `evaluate`'s."""
    return {name: result.summary for name, result in evaluate(qrels, run, measures, **options).items()}


def per_query(qrels: Qrels, run: Run, measures: str | Iterable[str] = DEFAULT_MEASURES, **options) -> pd.DataFrame:
    """One row per (query, measure), columns ``qid, measure, value``, in request and tool order (`options`:
    `evaluate`'s); with ``complete`` the qrels queries the run lacks too, with the value the summary averages in."""
    import pandas as pd

    rows = [(qid, name, value) for name, result in evaluate(qrels, run, measures, **options).items()
            for qid, value in (*result.values.items(), *result.missing.items())]
    return pd.DataFrame(rows, columns=list(COLUMNS)).astype({"qid": str, "measure": str, "value": float})
