"""Evaluate a run against qrels: per-query values and summaries, as trec_eval / gdeval.pl report them.

Options mirror trec_eval 9.0.8's:

- ``relevance_level`` (``-l``): the lowest label counted relevant by the
  binary trec_eval measures (map, recip_rank, recall, P, ...). nDCG measures
  use the labels themselves. TREC DL passage ranking uses ``-l 2`` for
  MAP/RR/recall. gdeval and NCG measures ignore it, as gdeval.pl has no such
  option.
- ``complete`` (``-c``): average over every query of the qrels, a query the
  run lacks adding 0 (trec_eval: all qrels queries; gdeval.pl and NCG: the
  qrels queries with a label > 0). Without it trec_eval 9.0.8 averages over
  the queries in both run and qrels (10.0 refuses such a run instead).
- ``depth`` (``-M``): evaluate only each query's top ``depth`` documents, in
  trec_eval's order (see `ordering`).

ir_measures' names (`common.metrics.registry`) carry their own relevance level
and always average over every qrels query, as ir_measures does.

trec_eval's fatal "no queries with both results and relevance info" is a
ValueError here; gdeval.pl instead reports 0 for such a run, and so do its
measures here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from common.metrics.gain_backend import gain_per_query
from common.metrics.msmarco_rr import msmarco_rr_per_query
from common.metrics.pytrec_eval_backend import request_names, trec_eval_per_query
from common.metrics.registry import (
    DEFAULT_MEASURES,
    TREC_EVAL_DIGITS,
    GainRequest,
    MeasureRequest,
    MsMarcoRRRequest,
    TrecEvalRequest,
    parse_measures,
)
from common.metrics.trec_eval_measures import MIN_GEO_MEAN, Aggregation

# Read-only views of common.data.formats.Qrels / Run (the layout pytrec_eval takes).
Qrels = Mapping[str, Mapping[str, int]]
Run = Mapping[str, Mapping[str, float]]


@dataclass(frozen=True)
class MeasureResult:
    """One measure on one run: per-query values and the summary the reference tool prints.

    ``values`` holds the queries the tool evaluates (in run and qrels), in the
    order it prints them; ``missing`` (only with ``complete``) the counted
    queries absent from the run, with the value averaged in for each. gdeval
    measures key queries by gdeval topic id (``2024-127266`` -> ``127266``).
    """

    name: str
    values: dict[str, float]
    missing: dict[str, float]
    summary: float
    aggregation: Aggregation
    digits: int

    @property
    def printed_per_query(self) -> bool:
        """trec_eval 9.0.8 prints no per-query line for num_q and the geometric means."""
        return self.name != "num_q" and self.aggregation is not Aggregation.GEOMETRIC

    def format(self, value: float) -> str:
        """`value` as the tool prints it: counts as integers, else `digits` decimals."""
        if self.aggregation is Aggregation.SUM:
            return str(int(value))
        return f"{value:.{self.digits}f}"


def evaluate(
    qrels: Qrels,
    run: Run,
    measures: str | Iterable[str] = DEFAULT_MEASURES,
    *,
    relevance_level: int = 1,
    complete: bool = False,
    depth: int | None = None,
) -> dict[str, MeasureResult]:
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


def _results(
    request: MeasureRequest,
    qrels: Qrels,
    run: Run,
    trec_eval_values: dict[str, dict[str, float]],
    relevance_level: int,
    complete: bool,
    depth: int | None,
) -> Iterable[tuple[str, MeasureResult]]:
    if isinstance(request, GainRequest):
        values, absent_topics = gain_per_query(qrels, run, request, depth=depth)
        missing = dict.fromkeys(absent_topics, 0.0) if complete else {}
        yield request.name, _result(request.name, values, missing, Aggregation.MEAN, request.measure.digits)
        return
    absent = sorted(qrels.keys() - run.keys())
    if isinstance(request, MsMarcoRRRequest):
        values = msmarco_rr_per_query(qrels, run, request, depth=depth)
        missing = dict.fromkeys(absent, 0.0)
        yield request.name, _result(request.name, values, missing, Aggregation.MEAN, TREC_EVAL_DIGITS)
        return
    measure = request.measure
    level = relevance_level if request.relevance_level is None else request.relevance_level
    counted = absent if complete or request.complete else []
    missing = {qid: measure.missing_value(qrels[qid], level) for qid in counted}
    for name in request_names(request):
        yield name, _result(name, trec_eval_values[name], missing, measure.aggregation, TREC_EVAL_DIGITS)


def _result(
    name: str, values: dict[str, float], missing: dict[str, float], aggregation: Aggregation, digits: int
) -> MeasureResult:
    return MeasureResult(
        name, values, missing, summarize(aggregation, values.values(), missing.values()), aggregation, digits
    )


def summarize(aggregation: Aggregation, evaluated: Iterable[float], missing: Iterable[float]) -> float:
    """The summary over all queries, accumulated in query order as trec_eval and gdeval.pl do.

    A plain loop rather than sum(): since Python 3.12 sum() compensates
    rounding, which can move the last bit away from the tools' naive sums.
    """
    evaluated, missing = list(evaluated), list(missing)
    count = len(evaluated) + len(missing)
    total = 0.0
    for value in evaluated:
        total += value
    if aggregation is Aggregation.GEOMETRIC:
        # meas_avg.c adds the absent queries' log(MIN_GEO_MEAN) as one product.
        total += len(missing) * math.log(MIN_GEO_MEAN)
        return math.exp(total / count) if count else 0.0
    for value in missing:
        total += value
    if aggregation is Aggregation.SUM:
        return total
    return total / count if count else 0.0


def evaluate_run(
    qrels: Qrels,
    run: Run,
    measures: str | Iterable[str] = DEFAULT_MEASURES,
    *,
    relevance_level: int = 1,
    complete: bool = False,
    depth: int | None = None,
) -> dict[str, float]:
    """``{measure: summary value}`` (trec_eval's ``all`` lines; gdeval's ``amean``), unrounded."""
    results = evaluate(qrels, run, measures, relevance_level=relevance_level, complete=complete, depth=depth)
    return {name: result.summary for name, result in results.items()}
