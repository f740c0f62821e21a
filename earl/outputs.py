"""What `earl.train` and `earl.evaluate` write and print: the re-ranked run, metrics.json and the comparison.

Conventions (README): ``run.trec``, ``metrics.json`` mapping run name -> measure -> value with the BM25 first
stage under ``bm25`` (and the baselines trained beside the model, ``--compare_with``), and ``task.json`` naming
the test task and the paper's dataset it is (`common.report.write_task_info`), written atomically and never over
an existing file; ``metrics.json`` last, as the mark of a finished run.

The paper's numbers (`paper_tables`): reproduced vs reported only where the test task is one of Table 2's MS MARCO
datasets (`DATASETS`); anything else gets a line saying there is nothing in the paper to compare with.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from common.data.formats import Run, write_run
from common.io import atomic_write
from common.metrics import evaluate_run
from common.report import compare, task_label, to_markdown, write_task_info
from earl.ranker import MEASURES

PAPER = "earl"
#: Table 2's MS MARCO datasets (ClueWeb09-B is not in ir_datasets' free part: no task names it).
DATASETS = ("msmarco-passage-dev", "trec-dl-2019-passage")
#: Run names (`earl.ranker.run_name`) -> Table 2's method names.
PAPER_METHODS = {
    "bert_ranker": "BERT ranker",
    "bert_siamese": "BERT-Siamese ranker",
    "earl_cls": "EARL ClsPool",
    "earl_mean": "EARL AvePool",
    "earl_cls_tied": "EARL ClsPool Tied",
    "earl_mean_tied": "EARL AvePool Tied",
}
MEASURE_LABELS = {"ndcg_cut_10": "NDCG@10", "map": "MAP", "recip_rank": "MRR", "mrr@10": "MRR@10"}


def write_results(output_dir: Path, name: str, run: Run, qrels, candidates: Run, relevance_level: int, *, task,
                  dataset: str | None, others: dict | None = None, overwrite: bool = False) -> dict:  # fmt: skip
    """Write ``run.trec``, ``task.json`` and, last, ``metrics.json`` ({name: ..., "bm25": ..., **others}, on the same
    queries); returns the metrics. `others`: metrics of baselines measured on the same queries.

    `overwrite`: replace those a killed run left (a resumed run writes the same)."""
    write_run(output_dir / "run.trec", run, tag=name, overwrite=overwrite)
    bm25 = {qid: candidates[qid] for qid in run if qid in candidates}
    metrics = {
        name: evaluate_run(qrels, run, MEASURES, relevance_level=relevance_level),
        "bm25": evaluate_run(qrels, bm25, MEASURES, relevance_level=relevance_level),
        **(others or {}),
    }
    write_task_info(output_dir, task, dataset, overwrite=overwrite)
    with atomic_write(output_dir / "metrics.json", overwrite=overwrite) as f:
        json.dump(metrics, f, indent=2, sort_keys=True)
        f.write("\n")
    return metrics


def metrics_table(metrics: dict, title: str) -> str:
    """The runs side by side (rows: runs, columns: NDCG@10, MAP, MRR, MRR@10)."""
    frame = pd.DataFrame(
        [{"run": run, **{MEASURE_LABELS[m]: values[m] for m in MEASURES}} for run, values in metrics.items()]
    )
    return f"{title}\n\n{to_markdown(frame)}"


def paper_tables(metrics: dict, task, dataset: str | None) -> str:
    """Reproduced vs reported on `dataset` (one of `DATASETS`, Table 2), else a line saying there is nothing to
    compare with."""
    if dataset is None:
        return (f"Nothing in the paper to compare with: {task_label(task)} is none of its datasets "
                f"({', '.join(DATASETS)}; earl.evaluate --dataset names the one a task from files is).")
    method_map = {run: PAPER_METHODS[run] for run in metrics if run in PAPER_METHODS}
    frame = compare(metrics, PAPER, tables=2, dataset=dataset, method_map=method_map)
    if frame.empty:
        return f"No reported row of the paper matches {sorted(metrics)} on {dataset}."
    columns = ["table", "method", "metric", "reported", "reproduced", "diff"]
    return f"Reproduced vs reported ({dataset})\n\n{to_markdown(frame[columns])}"
