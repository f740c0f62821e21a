"""What `earl.train` and `earl.evaluate` write and print (`common.commands.outputs`: run.trec, task.json, metrics.json
with BM25's and the ``--compare_with`` baselines', the table with Table 2's measures) and the comparison.

The paper's numbers (`paper_tables`): reproduced vs reported only where the test task is one of Table 2's MS MARCO
datasets (`DATASETS`); anything else gets a line saying there is nothing in the paper to compare with.
"""

from __future__ import annotations

from common.report import compare, task_label, to_markdown

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
