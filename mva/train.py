"""``python -m mva.train``: train MVA (Zhou and Devlin: "Multi-Vector Attention Models for Deep Re-ranking", 2021)
or a baseline (DE, CA), pick the checkpoint on dev MRR@10, re-rank the test candidates, and write and print the
run's metrics beside BM25's, each ``--compare_with`` baseline's and the paper's.

Without ``--config`` a small MVA, DE and CA train from scratch on the built-in collection
(`mva/configs/builtin.yaml`). Outputs: `common.commands.cli.RankerCLI`.
"""

from __future__ import annotations

from pathlib import Path

from common.commands.train import TrainCommand, link_bert_inputs

#: The paper's id in results/reported.
PAPER = "mva"
#: The paper's dataset (every table).
DATASETS = ("msmarco-passage-dev",)
#: Run names -> Table 5's method names.
PAPER_METHODS = {"ca": "CA (Ours)", "de": "DE (Ours)"}


def folder_name(config) -> str:
    """``mva-<architecture>``: the default output folder is ``outputs/mva-<architecture>-<time>``."""
    return "mva-" + config.model.architecture


def paper_tables(metrics: dict, task, dataset: str | None, data=None) -> str:
    """Reproduced vs reported on MS MARCO passage dev (Table 5's DE and CA, MRR@10), else a line saying there is
    nothing to compare with (`data` changes nothing here)."""
    from common.commands.outputs import nothing_to_compare, reproduced_vs_reported
    from common.report import compare

    if dataset is None:
        return nothing_to_compare(task, f"is none of its datasets ({', '.join(DATASETS)})")
    method_map = {run: PAPER_METHODS[run] for run in metrics if run in PAPER_METHODS}
    frame = compare(metrics, PAPER, tables=5, dataset=dataset, method_map=method_map)
    return reproduced_vs_reported(frame[frame["metric"] == "mrr@10"] if not frame.empty else frame, metrics, dataset)


#: This command (`common.commands.train`).
COMMAND = TrainCommand(
    name="mva.train", default_config=Path(__file__).parent / "configs" / "builtin.yaml",
    model="mva.ranker.MVARanker", data="mva.data.MVADataModule",
    monitor="dev/mrr@10",  # the measure of every table of the paper
    run_name=folder_name, paper=PAPER, paper_tables=paper_tables, links=link_bert_inputs,
    baselines=("de", "ca"),
)

#: Runs the command line (`common.commands.train.TrainCommand.main`).
main = COMMAND.main


if __name__ == "__main__":
    main()
