"""What `conformer_kernel.train` and `conformer_kernel.evaluate` write and print.

``run.<mode>.trec`` per evaluated setting (``rerank``, ``fullrank``), ``metrics.json``
mapping run name (``<model>-<mode>``, and ``bm25`` for the first-stage candidates on the same
queries) -> Table 1's measures, and ``task.json`` naming the test task and the paper's dataset it
is (`common.report.write_task_info`), written atomically and never over an existing file.

The paper's numbers (`paper_tables`): Table 1 reports TREC DL 2020 documents only (`DATASET`), so
reproduced vs reported side by side only where the test task is that dataset (an ``irds:`` task
found by `common.report.paper_dataset`, or what ``conformer_kernel.evaluate --dataset`` says of
files); anything else gets a line saying there is nothing in the paper to compare with, and the
built-in collection also Table 1, labelled as another dataset's, to show what scale it reaches.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from common.data.formats import Qrels, Run, ranked, write_run
from common.io import atomic_write
from common.metrics import evaluate_run
from common.report import load_reported, task_label, to_markdown, write_task_info
from conformer_kernel.ranker import MEASURES

PAPER = "conformer_kernel"
#: Table 1's dataset, the only one the paper reports.
DATASET = "trec-dl-2020-doc"

MEASURE_LABELS = {"ndcg_cut_10": "NDCG@10", "ncg@100": "NCG@100", "map": "AP", "recip_rank": "RR"}
#: Runs are 100 deep in Table 1 ("all metrics are computed at rank 100").
DEPTH = 100


def cut(run: Run, depth: int = DEPTH) -> Run:
    """Each query's top `depth` documents in trec_eval's order."""
    return {qid: dict(ranked(scores)[:depth]) for qid, scores in run.items()}


def write_results(output_dir: Path, model: str, runs: dict[str, Run], qrels: Qrels, candidates: Run,
                  relevance_level: int, *, task, dataset: str | None, overwrite: bool = False) -> dict:
    """Write ``run.<mode>.trec`` per run, ``task.json`` (test task spec `task`, the paper's `dataset` it is or None)
    and, last, as the mark of a finished run, ``metrics.json`` (BM25 on the same queries included); returns the
    metrics.

    `overwrite`: replace those a killed run left (a resumed run writes the same)."""
    metrics = {}
    for mode, run in runs.items():
        run = cut(run)
        write_run(output_dir / f"run.{mode}.trec", run, tag=f"{model}-{mode}", overwrite=overwrite)
        metrics[f"{model}-{mode}"] = evaluate_run(qrels, run, MEASURES, relevance_level=relevance_level)
    queries = set().union(*runs.values())
    bm25 = cut({qid: candidates[qid] for qid in queries if qid in candidates})
    metrics["bm25"] = evaluate_run(qrels, bm25, MEASURES, relevance_level=relevance_level)
    write_task_info(output_dir, task, dataset, overwrite=overwrite)
    with atomic_write(output_dir / "metrics.json", overwrite=overwrite) as f:
        json.dump(metrics, f, indent=2, sort_keys=True)
        f.write("\n")
    return metrics


def metrics_table(metrics: dict, title: str) -> str:
    """The reproduced runs side by side (rows: runs; columns: NDCG@10, NCG@100, AP, RR)."""
    frame = pd.DataFrame([{"run": run, **{MEASURE_LABELS[m]: values[m] for m in MEASURES}}
                          for run, values in metrics.items()])
    return f"{title}\n\n{to_markdown(frame)}"


def paper_tables(metrics: dict, task, dataset: str | None, orcas: bool = False) -> str:
    """What the paper has for `metrics`, measured on test task `task`: `comparison_table` where `dataset` is
    `DATASET`; else a line saying there is nothing to compare with and, for a built-in task, `reported_table`."""
    if dataset == DATASET:
        return comparison_table(metrics, orcas)
    text = (f"Nothing in the paper to compare with: {task_label(task)} is not {DATASET}, Table 1's dataset "
            f"(conformer_kernel.evaluate --dataset names it for a task from files).")
    if isinstance(task, str) and task.partition(":")[0] == "builtin":
        text += f"\n\n{reported_table()}"
    return text


def reported_table() -> str:
    """Table 1 of the paper (TREC DL 2020 documents), labelled as another dataset's numbers."""
    rows = load_reported(PAPER, table=1)
    frame = rows.pivot_table(index=["method", "setting"], columns="metric", values="value", aggfunc="first",
                             sort=False)
    frame = frame[list(MEASURE_LABELS)].rename(columns=MEASURE_LABELS).reset_index()
    return ("Reported in the paper, for reference only: another dataset (Table 1, TREC DL 2020 documents, official "
            f"evaluation)\n\n{to_markdown(frame)}")


def comparison_table(metrics: dict, orcas: bool = False) -> str:
    """Reproduced vs Table 1 on TREC DL 2020: runs ``ndrm<k>-<mode>`` against the row of that model and subtask."""
    reported = load_reported(PAPER, table=1)
    rows = []
    for run, values in metrics.items():
        model, _, mode = run.partition("-")
        method = model.upper() + (" + ORCAS" if orcas else "")
        match = reported[(reported["method"] == method) & (reported["setting"] == mode)]
        for _, row in match.iterrows():
            if row["metric"] in values:
                rows.append({"method": method, "subtask": mode, "measure": MEASURE_LABELS[row["metric"]],
                             "reported": row["value"], "reproduced": values[row["metric"]],
                             "diff": values[row["metric"]] - row["value"]})
    if not rows:
        return f"No row of Table 1 matches {sorted(metrics)}."
    return f"Reproduced vs reported (Table 1, TREC DL 2020 documents)\n\n{to_markdown(pd.DataFrame(rows))}"
