"""Per-query trec_eval measures through pytrec_eval 0.5.11 (trec_eval 9.0.8's code, float32 score ties included), with
trec_eval's ``-M`` applied by cutting the run in trec_eval's order first (`ordering.cut_run`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

import pytrec_eval

from common.metrics.ordering import cut_run
from common.metrics.registry import TrecEvalRequest


@functools.cache
def output_names(spec: str) -> tuple[str, ...]:
    """The names trec_eval prints for ``-m spec`` (``recall.100,1000`` -> recall_100, recall_1000), asked of
    pytrec_eval on a one-document example, ordered by parameter."""
    names = pytrec_eval.RelevanceEvaluator({"q": {"d": 1}}, {spec}).evaluate({"q": {"d": 1.0}})["q"]
    return tuple(sorted(names, key=_parameter_value))


def _parameter_value(name: str) -> float:
    suffix = name.rsplit("_", 1)[-1]
    try:
        return float(suffix)
    except ValueError:
        return 0.0


def request_names(request: TrecEvalRequest) -> tuple[str, ...]:
    return (request.alias,) if request.alias else output_names(request.spec)


def trec_eval_per_query(qrels: Mapping[str, Mapping[str, int]], run: Mapping[str, Mapping[str, float]],
                        requests: Sequence[TrecEvalRequest], *, relevance_level: int,
                        depth: int | None) -> dict[str, dict[str, float]]:
    """``{printed name: {qid: value}}`` for every query in both the run and the qrels, in as few pytrec_eval passes
    as depths, relevance levels and parameter lists allow."""
    groups: dict[tuple[int | None, int], list[TrecEvalRequest]] = {}
    for request in requests:
        level = relevance_level if request.relevance_level is None else request.relevance_level
        depths = [d for d in (depth, request.depth) if d is not None]  # the smaller of -M and the request's own
        groups.setdefault((min(depths, default=None), level), []).append(request)

    values: dict[str, dict[str, float]] = {}
    for (group_depth, level), group in groups.items():
        ranked = cut_run(run, group_depth)
        for specs, members in _passes(group):
            evaluator = pytrec_eval.RelevanceEvaluator(qrels, specs, relevance_level=level)
            per_query = evaluator.evaluate(ranked)
            qids = sorted(per_query)  # trec_eval's query order: qid strings, byte-wise
            for request in members:
                for key, name in zip(output_names(request.spec), request_names(request), strict=True):
                    values.setdefault(name, {qid: per_query[qid][key] for qid in qids})
    return values


def _passes(group: Sequence[TrecEvalRequest]) -> list[tuple[set[str], list[TrecEvalRequest]]]:
    """The requests in at most two pytrec_eval passes, (specs, requests served): each family with its parameter lists
    merged, then the families also asked with trec_eval's defaults (which one pass cannot hold beside parameters)."""
    explicit: dict[str, set[str]] = {}
    for request in group:
        if request.params:
            explicit.setdefault(request.measure.name, set()).update(request.params)
    second = [r for r in group if not r.params and r.measure.name in explicit]
    first = [r for r in group if r.params or r.measure.name not in explicit]
    specs = {f"{family}.{','.join(sorted(params, key=float))}" for family, params in explicit.items()}
    passes = [(specs | {r.measure.name for r in first if not r.params}, first)]
    if second:
        passes.append(({r.measure.name for r in second}, second))
    return passes
