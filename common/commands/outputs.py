"""What the train and evaluate commands write and print: ``run.trec`` (``run.<mode>.trec`` for several), ``task.json``
and, last, ``metrics.json`` (run -> measure -> value, BM25 under ``bm25``), never over a file. A task without
judgments writes no metrics and prints `NO_QRELS`; the paper's numbers are printed only for the paper's datasets."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from common.data.formats import Qrels, Run, ranked, write_run
from common.io import atomic_write
from common.metrics import evaluate_run
from common.report import task_label, to_markdown, write_task_info

RUN = "run.trec"
#: What an evaluate command prints in place of its metrics where its task has no judgments.
NO_QRELS = "No qrels: the test task judges nothing, so the run is written and no metrics are computed."
MEASURE_LABELS = {"ndcg_cut_10": "NDCG@10", "map": "MAP", "recip_rank": "MRR", "mrr@10": "MRR@10"}


def mode_run(mode: str) -> str:
    return f"run.{mode}.trec"


def top(run: Run, depth: int) -> Run:
    return {qid: dict(ranked(scores)[:depth]) for qid, scores in run.items()}


def write_results(output_dir: Path, name: str, run: Run, qrels: Qrels, candidates: Run, relevance_level: int,
                  **settings) -> dict | None:
    """Write ``run.trec``, ``task.json`` and, last, ``metrics.json`` (`settings`: `_write`'s)."""
    return _write(output_dir, {RUN: (name, run)}, qrels, candidates, relevance_level, **settings)


def write_mode_results(output_dir: Path, name: str, runs: dict[str, Run], qrels: Qrels, candidates: Run,
                       relevance_level: int, *, depth: int, **settings) -> dict | None:
    """Write ``run.<mode>.trec`` of each of `runs`, cut to `depth`, ``task.json`` and, last, ``metrics.json``."""
    named = {mode_run(mode): (f"{name}-{mode}", top(run, depth)) for mode, run in runs.items()}
    return _write(output_dir, named, qrels, candidates, relevance_level, depth=depth, **settings)


def _write(output_dir: Path, runs: dict[str, tuple[str, Run]], qrels: Qrels, candidates: Run, relevance_level: int,
           *, measures: tuple[str, ...], task, dataset: str | None, others: dict | None = None,
           depth: int | None = None, overwrite: bool = False) -> dict | None:
    for file, (name, run) in runs.items():
        write_run(output_dir / file, run, tag=name, overwrite=overwrite)
    if not qrels:
        write_task_info(output_dir, task, dataset, overwrite=overwrite)
        return None
    metrics = {name: evaluate_run(qrels, run, measures, relevance_level=relevance_level) for name, run in runs.values()}
    queries = dict.fromkeys(qid for _, run in runs.values() for qid in run)
    bm25 = {qid: candidates[qid] for qid in queries if qid in candidates}
    metrics["bm25"] = evaluate_run(qrels, bm25 if depth is None else top(bm25, depth), measures,
                                   relevance_level=relevance_level)
    metrics.update(others or {})
    write_task_info(output_dir, task, dataset, overwrite=overwrite)
    with atomic_write(output_dir / "metrics.json", overwrite=overwrite) as f:
        json.dump(metrics, f, indent=2, sort_keys=True)
        f.write("\n")
    return metrics


def metrics_table(metrics: dict, title: str, measures: tuple[str, ...], labels: dict | None = None) -> str:
    labels = labels or MEASURE_LABELS
    frame = pd.DataFrame([{"run": run, **{labels[m]: values[m] for m in measures}} for run, values in metrics.items()])
    return f"{title}\n\n{to_markdown(frame)}"


def is_builtin(task) -> bool:
    return isinstance(task, str) and task.partition(":")[0] == "builtin"


def nothing_to_compare(task, why: str) -> str:
    """The line printed where the paper has nothing to compare with: `why` says how `task` misses its datasets."""
    return f"Nothing in the paper to compare with: {task_label(task)} {why}."


def reproduced_vs_reported(frame: pd.DataFrame, metrics: dict, dataset: str) -> str:
    """The rows `common.report.compare` matched for `metrics` on `dataset`, or a line saying none did."""
    if frame.empty:
        return f"No reported row of the paper matches {sorted(metrics)} on {dataset}."
    columns = ["table", "method", "metric", "reported", "reproduced", "diff"]
    return f"Reproduced vs reported ({dataset})\n\n{to_markdown(frame[columns])}"
