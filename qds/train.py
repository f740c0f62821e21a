"""``python -m qds.train``: train QDS-Transformer (Jiang, Xiong, Lee, Wang: "Long Document Ranking with
Query-Directed Sparse Transformer", Findings of EMNLP 2020) or a Table 2/4 variant, pick the checkpoint on dev
MRR@10, re-rank the test candidates, and write and print the run's metrics beside BM25's and the paper's.

Without ``--config`` a small QDS trains from scratch on the built-in collection (`qds/configs/builtin.yaml`, CPU
minutes); ``--config qds/configs/trec-dl-2019/<row>.yaml`` runs a paper row. Outputs: `common.commands.cli.RankerCLI`.
"""

from __future__ import annotations

from operator import attrgetter
from pathlib import Path

from common.commands.train import TrainCommand, link_tokenizer

#: The paper's id in results/reported.
PAPER = "qds"
#: The datasets of Tables 2 and 4: TREC DL 2019 documents (NDCG@10, MAP) and MS MARCO documents dev (MRR@10).
DATASETS = ("trec-dl-2019-doc", "msmarco-doc-dev")
#: Run names (= pattern) -> the method names of Tables 2 and 4.
PAPER_METHODS = {"qds": "QDS-Transformer", "qds_q": "QDS-Transformer (Q)", "qds_s": "QDS-Transformer (S)",
                 "sparse": "Sparse-Transformer", "longformer_qa": "Longformer-QA", "firstp": "RoBERTa (FirstP)",
                 "maxp": "RoBERTa (MaxP)", "bm25": "BM25"}


def links(parser) -> None:
    """The data module gets the model's pattern; the model its inputs' tokenizer, length and negatives."""
    parser.link_arguments("model.pattern", "data.pattern")
    link_tokenizer(parser)
    parser.link_arguments("data.max_length", "model.max_length")
    parser.link_arguments("data.negatives", "model.negatives")


# --- the paper's numbers -----------------------------------------------------------------------------------


def paper_tables(metrics: dict, task, dataset: str | None, data=None) -> str:
    """`comparison_table` on `dataset` (one of `DATASETS`); with None, a line saying there is nothing to compare with
    and, for a built-in task `task`, `reported_table`. (`data`, the data module tested, changes nothing here.)"""
    from common.commands.outputs import is_builtin, nothing_to_compare

    if dataset is not None:
        return comparison_table(metrics, dataset)
    text = nothing_to_compare(task, f"is none of its datasets ({', '.join(DATASETS)}; qds.evaluate --dataset names "
                                    "the one a task from files is)")
    if is_builtin(task):
        text += f"\n\n{reported_table(metrics)}"
    return text


def reported_table(metrics: dict) -> str:
    """The paper's Table 2/4 rows of the runs of `metrics` and BM25, labelled as another dataset's numbers."""
    from common.commands.outputs import MEASURE_LABELS
    from common.report import load_reported, to_markdown

    methods = [method for run in metrics if run != "bm25" for method in _paper_names(run)]
    rows = load_reported(PAPER, table=[2, 4], method=methods + ["BM25"])
    rows = rows[rows["setting"].str.startswith(("first-stage-bm25", "rerank-top100-bm25"))]
    frame = rows.pivot_table(index=["table", "method"], columns="metric", values="value", aggfunc="first")
    frame = frame.rename(columns=MEASURE_LABELS).reset_index()
    return ("Reported in the paper, for reference only: another dataset (TREC DL 2019 documents test, MRR@10 on "
            f"MS MARCO dev), 12-layer pretrained models\n\n{to_markdown(frame)}")


def comparison_table(metrics: dict, dataset: str) -> str:
    """Reproduced vs reported on the same benchmark (`common.report.compare`), Tables 2 and 4."""
    import pandas as pd

    from common.commands.outputs import reproduced_vs_reported
    from common.report import compare, load_reported

    frames = []
    for table in (2, 4):
        reported = load_reported(PAPER, table=table, dataset=dataset)
        if reported.empty:  # Table 4 has no MS MARCO dev column
            continue
        methods = set(reported["method"])
        method_map = {run: m for run in metrics for m in _paper_names(run) if m in methods}
        frames.append(compare(metrics, PAPER, tables=table, dataset=dataset, method_map=method_map))
    return reproduced_vs_reported(pd.concat(frames, ignore_index=True), metrics, dataset)


def _paper_names(name: str) -> list[str]:
    """The reported method names of run `name` (Table 4 spells some differently: matched loosely)."""
    from common.report import load_reported

    wanted = _loose(PAPER_METHODS.get(name, name))
    return [m for m in load_reported(PAPER)["method"].unique() if _loose(m) == wanted]


def _loose(method: str) -> str:
    return "".join(c for c in method.lower() if c.isalnum())


#: This command (`common.commands.train`).
COMMAND = TrainCommand(
    name="qds.train", default_config=Path(__file__).parent / "configs" / "builtin.yaml", model="qds.ranker.QDSRanker",
    data="qds.data.QDSDataModule", monitor="dev/mrr@10",  # the paper's model selection (Sec. 5)
    run_name=lambda config: f"qds-{config.model.pattern}", tested_name=attrgetter("hparams.pattern"),
    paper=PAPER, paper_tables=paper_tables, links=links,
)

#: Runs the command line (`common.commands.train.TrainCommand.main`).
main = COMMAND.main


if __name__ == "__main__":
    main()
