"""``python -m earl.train``: train EARL (Gao, Dai, Callan: "EARL: Speedup Transformer-based Rankers with
Pre-computed Representation", 2020) or a Table 2 baseline, pick the checkpoint on dev MRR@10, re-rank the test
candidates, and write and print the run's metrics beside BM25's, each ``--compare_with`` baseline's and the paper's.

Without ``--config`` a small EARL and a BERT ranker train from scratch on the built-in collection
(`earl/configs/builtin.yaml`); ``--config earl/configs/msmarco/<row>.yaml`` runs a paper row. Outputs:
`common.commands.cli.RankerCLI`; ``earl.index`` and ``earl.evaluate --store`` reuse the checkpoint.
"""

from __future__ import annotations

from pathlib import Path

from common.commands.train import TrainCommand, link_bert_inputs

#: The paper's id in results/reported.
PAPER = "earl"
#: Table 2's MS MARCO datasets (ClueWeb09-B is not in ir_datasets' free part: no task names it).
DATASETS = ("msmarco-passage-dev", "trec-dl-2019-passage")
#: Run names (`earl.ranker.run_name`) -> Table 2's method names.
PAPER_METHODS = {
    "bert_ranker": "BERT ranker", "bert_siamese": "BERT-Siamese ranker", "earl_cls": "EARL ClsPool",
    "earl_mean": "EARL AvePool", "earl_cls_tied": "EARL ClsPool Tied", "earl_mean_tied": "EARL AvePool Tied",
}


def folder_name(config) -> str:
    """``earl-<variant>``: the default output folder is ``outputs/earl-<variant>-<time>``."""
    from earl.ranker import run_name

    model = config.model
    return "earl-" + run_name(model.architecture, model.pool, model.tied).removeprefix("earl_")


def paper_tables(metrics: dict, task, dataset: str | None, data=None, relevance_level: int | None = None) -> str:
    """Reproduced vs reported on `dataset` (Table 2), each row with both numbers' relevance level (`relevance_level`,
    else `data`'s), or a line saying there is nothing to compare with."""
    from common.commands.outputs import nothing_to_compare, reproduced_vs_reported
    from common.report import compare, level_note, to_markdown

    if dataset is None:
        return nothing_to_compare(task, f"is none of its datasets ({', '.join(DATASETS)}; earl.evaluate --dataset "
                                        "names the one a task from files is)")
    if relevance_level is None and data is not None:
        relevance_level = data.tasks.relevance_level
    method_map = {run: PAPER_METHODS[run] for run in metrics if run in PAPER_METHODS}
    frame = compare(metrics, PAPER, tables=2, dataset=dataset, method_map=method_map, relevance_level=relevance_level)
    if frame.empty:
        return reproduced_vs_reported(frame, metrics, dataset)
    columns = ["table", "method", "metric", "reported", "reproduced", "diff", "reported_level", "reproduced_level"]
    note = level_note(frame)
    return f"Reproduced vs reported ({dataset})\n\n{to_markdown(frame[columns])}" + (f"\n{note}" if note else "")


#: This command (`common.commands.train`).
COMMAND = TrainCommand(
    name="earl.train", default_config=Path(__file__).parent / "configs" / "builtin.yaml",
    model="earl.ranker.EARLRanker", data="earl.data.EARLDataModule",
    monitor="dev/mrr@10",  # MS MARCO's official measure (the paper does not say)
    run_name=folder_name, paper=PAPER, paper_tables=paper_tables, links=link_bert_inputs,
    baselines=("bert_ranker", "bert_siamese"),
)

#: Runs the command line (`common.commands.train.TrainCommand.main`).
main = COMMAND.main


if __name__ == "__main__":
    main()
