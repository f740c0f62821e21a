"""What `mva.train` writes and prints (`common.commands.outputs`: run.trec, task.json, metrics.json, the table with
MVA's measures) and the comparison with the paper: every table of the paper is on MS MARCO passage dev (MRR@10);
anything else gets a line saying there is nothing in the paper to compare with.
"""

from __future__ import annotations

from common.report import compare, task_label, to_markdown

PAPER = "mva"
#: The paper's dataset (every table).
DATASETS = ("msmarco-passage-dev",)
#: Run names -> Table 5's method names.
PAPER_METHODS = {"ca": "CA (Ours)", "de": "DE (Ours)"}


def paper_tables(metrics: dict, task, dataset: str | None) -> str:
    """Reproduced vs reported on MS MARCO passage dev (Table 5's DE and CA), else a line saying there is nothing
    to compare with."""
    if dataset is None:
        return (f"Nothing in the paper to compare with: {task_label(task)} is none of its datasets "
                f"({', '.join(DATASETS)}).")
    method_map = {run: PAPER_METHODS[run] for run in metrics if run in PAPER_METHODS}
    frame = compare(metrics, PAPER, tables=5, dataset=dataset, method_map=method_map)
    frame = frame[frame["metric"] == "mrr@10"] if not frame.empty else frame
    if frame.empty:
        return f"No reported row of the paper matches {sorted(metrics)} on {dataset}."
    columns = ["table", "method", "metric", "reported", "reproduced", "diff"]
    return f"Reproduced vs reported ({dataset})\n\n{to_markdown(frame[columns])}"
