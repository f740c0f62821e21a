"""What `qds.train` and `qds.evaluate` write and print: the re-ranked run, metrics.json and the comparison.

Conventions (README): ``run.trec``, ``metrics.json`` mapping run name -> measure -> value with
the BM25 first stage under ``bm25``, and ``task.json`` naming the test task and the paper's dataset
it is (`common.report.write_task_info`), written atomically and never over an existing file.
The re-ranked run itself is `common.data.rerank.reranked_run`'s (documents below the re-ranking depth
keep their first-stage order under the re-ranked ones).

The paper's numbers (`paper_tables`): reproduced vs reported side by side only where the test task is
one of the datasets of Tables 2 and 4 (`DATASETS`: an ``irds:`` task that is, found by
`common.report.paper_dataset`, or what ``qds.evaluate --dataset`` says of files); anything else gets a
line saying there is nothing in the paper to compare with, and the built-in collection also the
reported rows, labelled as another dataset's, to show what scale the paper's models reach.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from common.data.formats import Run, write_run
from common.io import atomic_write
from common.metrics import evaluate_run
from common.report import compare, load_reported, task_label, to_markdown, write_task_info
from qds.model import MEASURES

PAPER = "qds"
#: The datasets of Tables 2 and 4: TREC DL 2019 documents (NDCG@10, MAP) and MS MARCO documents dev (MRR@10).
DATASETS = ("trec-dl-2019-doc", "msmarco-doc-dev")

#: Run names (= pattern) -> the method names of Tables 2 and 4.
PAPER_METHODS = {
    "qds": "QDS-Transformer",
    "qds_q": "QDS-Transformer (Q)",
    "qds_s": "QDS-Transformer (S)",
    "sparse": "Sparse-Transformer",
    "longformer_qa": "Longformer-QA",
    "firstp": "RoBERTa (FirstP)",
    "maxp": "RoBERTa (MaxP)",
    "bm25": "BM25",
}
MEASURE_LABELS = {"ndcg_cut_10": "NDCG@10", "map": "MAP", "mrr@10": "MRR@10"}


def write_results(output_dir: Path, name: str, run: Run, qrels, candidates: Run, relevance_level: int, *,
                  task, dataset: str | None, overwrite: bool = False) -> dict:
    """Write ``run.trec``, ``task.json`` (test task spec `task`, the paper's `dataset` it is or None) and, last, as
    the mark of a finished run, ``metrics.json`` ({name: ..., "bm25": ...} on the same queries); returns the metrics.

    `overwrite`: replace those a killed run left (a resumed run writes the same)."""
    write_run(output_dir / "run.trec", run, tag=name, overwrite=overwrite)
    bm25 = {qid: candidates[qid] for qid in run if qid in candidates}
    metrics = {
        name: evaluate_run(qrels, run, MEASURES, relevance_level=relevance_level),
        "bm25": evaluate_run(qrels, bm25, MEASURES, relevance_level=relevance_level),
    }
    write_task_info(output_dir, task, dataset, overwrite=overwrite)
    with atomic_write(output_dir / "metrics.json", overwrite=overwrite) as f:
        json.dump(metrics, f, indent=2, sort_keys=True)
        f.write("\n")
    return metrics


def metrics_table(metrics: dict, title: str) -> str:
    """The reproduced runs side by side (rows: runs, columns: NDCG@10, MAP, MRR@10)."""
    frame = pd.DataFrame(
        [{"run": run, **{MEASURE_LABELS[m]: values[m] for m in MEASURES}} for run, values in metrics.items()]
    )
    return f"{title}\n\n{to_markdown(frame)}"


def reported_table(name: str) -> str:
    """The paper's Table 2/4 rows of `name` and BM25, labelled as TREC DL 2019 / MS MARCO dev numbers."""
    rows = load_reported("qds", table=[2, 4], method=_paper_names(name) + ["BM25"])
    rows = rows[rows["setting"].str.startswith(("first-stage-bm25", "rerank-top100-bm25"))]
    frame = rows.pivot_table(index=["table", "method"], columns="metric", values="value", aggfunc="first")
    frame = frame.rename(columns=MEASURE_LABELS).reset_index()
    return (
        "Reported in the paper, for reference only: another dataset (TREC DL 2019 documents test, MRR@10 on "
        f"MS MARCO dev), 12-layer pretrained models\n\n{to_markdown(frame)}"
    )


def paper_tables(metrics: dict, name: str, task, dataset: str | None) -> str:
    """What the paper has for `metrics`, measured on test task `task`: `comparison_table` on `dataset` (one of
    `DATASETS`); with None, a line saying there is nothing to compare with and, for a built-in task,
    `reported_table`."""
    if dataset is not None:
        return comparison_table(metrics, dataset)
    text = (f"Nothing in the paper to compare with: {task_label(task)} is none of its datasets "
            f"({', '.join(DATASETS)}; qds.evaluate --dataset names the one a task from files is).")
    if isinstance(task, str) and task.partition(":")[0] == "builtin":
        text += f"\n\n{reported_table(name)}"
    return text


def comparison_table(metrics: dict, dataset: str) -> str:
    """Reproduced vs reported on the same benchmark (`common.report.compare`), Tables 2 and 4."""
    frames = []
    for table in (2, 4):
        reported = load_reported(PAPER, table=table, dataset=dataset)
        if reported.empty:  # Table 4 has no MS MARCO dev column
            continue
        methods = set(reported["method"])
        method_map = {run: m for run in metrics for m in _paper_names(run) if m in methods}
        frames.append(compare(metrics, PAPER, tables=table, dataset=dataset, method_map=method_map))
    frame = pd.concat(frames, ignore_index=True)
    if frame.empty:
        return f"No reported row of the paper matches {sorted(metrics)} on {dataset}."
    columns = ["table", "method", "metric", "reported", "reproduced", "diff"]
    return f"Reproduced vs reported ({dataset})\n\n{to_markdown(frame[columns])}"


def _paper_names(name: str) -> list[str]:
    """The reported method names of run `name` (Table 4 spells some differently: matched loosely)."""
    wanted = _loose(PAPER_METHODS.get(name, name))
    return [m for m in load_reported("qds")["method"].unique() if _loose(m) == wanted]


def _loose(method: str) -> str:
    return "".join(c for c in method.lower() if c.isalnum())
