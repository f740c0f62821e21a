"""What the train and evaluate commands write and print: the test runs, metrics.json, task.json and the tables.

Conventions (README): ``run.trec`` (the one test run of a command; ``run.<mode>.trec`` for each of several, the
Conformer-Kernel's ``rerank`` and ``fullrank``), ``metrics.json`` mapping run name -> measure -> value with the BM25
first stage under ``bm25`` on the same queries (and baselines measured on them), and ``task.json`` naming the test
task and the paper's dataset it is (`common.report.write_task_info`), written atomically and never over an
existing file; ``metrics.json`` last, as the mark of a finished run. A test task without judgments (empty qrels,
`common.data.source`: ``--topics/--run/--collection`` or ``--rank_llm`` without ``--qrels``) is re-ranked, not
measured: its runs and ``task.json`` are written (task.json last) and no ``metrics.json``; the command prints
`NO_QRELS` in place of the tables.

The paper's numbers: each package's ``paper_tables`` (in its ``train.py``) puts the metrics beside its paper's
tables only where the test task is one of the paper's datasets; anything else gets the line of
`nothing_to_compare`. `reproduced_vs_reported` prints what `common.report.compare` matched.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from common.data.formats import Qrels, Run, ranked, write_run
from common.io import atomic_write
from common.metrics import evaluate_run
from common.report import task_label, to_markdown, write_task_info

#: The file of a command's one test run.
RUN = "run.trec"
#: What an evaluate command prints in place of its metrics where its task has no judgments.
NO_QRELS = "No qrels: the test task judges nothing, so the run is written and no metrics are computed."
#: Column names of measures in printed tables.
MEASURE_LABELS = {"ndcg_cut_10": "NDCG@10", "map": "MAP", "recip_rank": "MRR", "mrr@10": "MRR@10"}


def mode_run(mode: str) -> str:
    """The file of test mode `mode`'s run where a command tests several ways (``run.rerank.trec``)."""
    return f"run.{mode}.trec"


def top(run: Run, depth: int) -> Run:
    """Each query's top `depth` documents of `run`, in trec_eval's order."""
    return {qid: dict(ranked(scores)[:depth]) for qid, scores in run.items()}


def write_results(output_dir: Path, name: str, run: Run, qrels: Qrels, candidates: Run, relevance_level: int, *,
                  measures: tuple[str, ...], task, dataset: str | None, others: dict | None = None,
                  overwrite: bool = False) -> dict | None:  # fmt: skip
    """Write `run` to ``run.trec`` (tagged `name`), ``task.json`` (test task spec `task`, the paper's `dataset` it is
    or None) and, last, ``metrics.json`` ({name: ..., "bm25": ..., **others}, on the same queries); returns the
    metrics. `others`: metrics of baselines measured on the same queries. Empty `qrels` (a task without
    judgments): the run and task.json alone, and None returned.

    `overwrite`: replace those a killed run left (a resumed run writes the same)."""
    return _write(output_dir, {RUN: (name, run)}, qrels, candidates, relevance_level, measures=measures, task=task,
                  dataset=dataset, others=others, overwrite=overwrite)  # fmt: skip


def write_mode_results(output_dir: Path, name: str, runs: dict[str, Run], qrels: Qrels, candidates: Run,
                       relevance_level: int, *, measures: tuple[str, ...], task, dataset: str | None, depth: int,
                       others: dict | None = None, overwrite: bool = False) -> dict | None:  # fmt: skip
    """`write_results` for a command that tests several ways: each of `runs` (mode -> run) cut to its top `depth`
    and written to ``run.<mode>.trec`` as ``<name>-<mode>``, and BM25's on their queries cut alike."""
    named = {mode_run(mode): (f"{name}-{mode}", top(run, depth)) for mode, run in runs.items()}
    return _write(output_dir, named, qrels, candidates, relevance_level, measures=measures, task=task,
                  dataset=dataset, others=others, depth=depth, overwrite=overwrite)  # fmt: skip


def _write(output_dir: Path, runs: dict[str, tuple[str, Run]], qrels: Qrels, candidates: Run, relevance_level: int,
           *, measures: tuple[str, ...], task, dataset: str | None, others: dict | None = None,
           depth: int | None = None, overwrite: bool = False) -> dict | None:  # fmt: skip
    """Write each of `runs` (file -> (name, run)), task.json and metrics.json (see `write_results`); None where
    `qrels` are empty, after the runs and task.json."""
    for file, (name, run) in runs.items():
        write_run(output_dir / file, run, tag=name, overwrite=overwrite)
    if not qrels:
        write_task_info(output_dir, task, dataset, overwrite=overwrite)
        return None
    metrics = {name: evaluate_run(qrels, run, measures, relevance_level=relevance_level)
               for name, run in runs.values()}
    queries = dict.fromkeys(qid for _, run in runs.values() for qid in run)
    bm25 = {qid: candidates[qid] for qid in queries if qid in candidates}
    metrics["bm25"] = evaluate_run(qrels, bm25 if depth is None else top(bm25, depth), measures,
                                   relevance_level=relevance_level)  # fmt: skip
    metrics.update(others or {})
    write_task_info(output_dir, task, dataset, overwrite=overwrite)
    with atomic_write(output_dir / "metrics.json", overwrite=overwrite) as f:
        json.dump(metrics, f, indent=2, sort_keys=True)
        f.write("\n")
    return metrics


def metrics_table(metrics: dict, title: str, measures: tuple[str, ...], labels: dict | None = None) -> str:
    """The runs side by side (rows: runs, columns: `measures`, named by `labels`, default `MEASURE_LABELS`)."""
    labels = labels or MEASURE_LABELS
    frame = pd.DataFrame([{"run": run, **{labels[m]: values[m] for m in measures}} for run, values in metrics.items()])
    return f"{title}\n\n{to_markdown(frame)}"


def is_builtin(task) -> bool:
    """Whether test task spec `task` is one of the built-in collection's (``builtin:<split>``)."""
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
