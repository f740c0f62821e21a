"""What a package's train and evaluate commands write and print: the re-ranked run, metrics.json, the table.

Conventions (README): ``run.trec``, ``metrics.json`` mapping run name -> measure -> value with the BM25 first
stage under ``bm25`` (and baselines measured on the same queries), and ``task.json`` naming the test task and the
paper's dataset it is (`common.report.write_task_info`), written atomically and never over an existing file;
``metrics.json`` last, as the mark of a finished run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from common.data.formats import Run, write_run
from common.io import atomic_write
from common.metrics import evaluate_run
from common.report import to_markdown, write_task_info

#: Column names of measures in printed tables.
MEASURE_LABELS = {"ndcg_cut_10": "NDCG@10", "map": "MAP", "recip_rank": "MRR", "mrr@10": "MRR@10"}


def write_results(output_dir: Path, name: str, run: Run, qrels, candidates: Run, relevance_level: int, *,
                  measures: tuple[str, ...], task, dataset: str | None, others: dict | None = None,
                  overwrite: bool = False) -> dict:  # fmt: skip
    """Write ``run.trec``, ``task.json`` and, last, ``metrics.json`` ({name: ..., "bm25": ..., **others}, on the same
    queries); returns the metrics. `others`: metrics of baselines measured on the same queries.

    `overwrite`: replace those a killed run left (a resumed run writes the same)."""
    write_run(output_dir / "run.trec", run, tag=name, overwrite=overwrite)
    bm25 = {qid: candidates[qid] for qid in run if qid in candidates}
    metrics = {
        name: evaluate_run(qrels, run, measures, relevance_level=relevance_level),
        "bm25": evaluate_run(qrels, bm25, measures, relevance_level=relevance_level),
        **(others or {}),
    }
    write_task_info(output_dir, task, dataset, overwrite=overwrite)
    with atomic_write(output_dir / "metrics.json", overwrite=overwrite) as f:
        json.dump(metrics, f, indent=2, sort_keys=True)
        f.write("\n")
    return metrics


def metrics_table(metrics: dict, title: str, measures: tuple[str, ...]) -> str:
    """The runs side by side (rows: runs, columns: `measures`)."""
    frame = pd.DataFrame(
        [{"run": run, **{MEASURE_LABELS[m]: values[m] for m in measures}} for run, values in metrics.items()]
    )
    return f"{title}\n\n{to_markdown(frame)}"
