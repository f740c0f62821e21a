"""``python -m conformer_kernel.train``: train NDRM1, NDRM2 or NDRM3, the Conformer-Kernel with query term
independence (Mitra et al.: "Improving Transformer-Kernel Ranking Model Using Conformer and Query Term
Independence", TREC 2020 Deep Learning track), pick the checkpoint on dev NDCG@10 and test it in each of
``--test_modes``: ``rerank`` (BM25's top 100) and ``fullrank`` (s_td precomputed over the test collection,
`conformer_kernel.index`, into ``index/``; the paper's single-stage retrieval).

Without ``--config`` NDRM3 trains on the built-in collection (`conformer_kernel/configs/builtin.yaml`); ``--config
conformer_kernel/configs/trec-dl-2020/<row>.yaml`` runs a Table 1 setting. Outputs: `common.commands.cli.RankerCLI`.
"""

from __future__ import annotations

from operator import attrgetter
from pathlib import Path

from common.commands.train import TestModes, TrainCommand
from conformer_kernel import hidden_size

#: How the best checkpoint is tested (``--test_modes``; see the module docstring).
MODES = ("rerank", "fullrank")
#: Runs are 100 deep in Table 1 ("all metrics are computed at rank 100").
DEPTH = 100
#: The paper's id in results/reported.
PAPER = "conformer_kernel"
#: Table 1's dataset, the only one the paper reports.
DATASET = "trec-dl-2020-doc"
#: Table 1's names of its measures.
MEASURE_LABELS = {"ndcg_cut_10": "NDCG@10", "ncg@100": "NCG@100", "map": "AP", "recip_rank": "RR"}


def links(parser) -> None:
    """The model's sizes from the data module's: its document limit, hidden size and vocabulary."""
    parser.link_arguments("data.max_doc_terms", "model.max_doc_terms")
    parser.link_arguments("data.embedding_dim", "model.hidden_size", compute_fn=hidden_size)
    parser.link_arguments("data", "model.vocab_size", apply_on="instantiate", compute_fn=lambda d: d.vocab_size)


def tested_runs(cli, modes: list[str]) -> dict:
    """The test run of each of `modes` (see the module docstring), from the trained `cli`'s model and data."""
    from common.data.rerank import reranked_run
    from conformer_kernel.impact_index import full_ranking

    model, data = cli.model, cli.datamodule
    runs = {}
    if "rerank" in modes:
        runs["rerank"] = reranked_run(data.test_pairs(), model.test_scores, data.source("test").candidates())
    if "fullrank" in modes:
        accelerator = "gpu" if model.device.type == "cuda" else "cpu"
        runs["fullrank"] = full_ranking(model.eval(), data.featurizer, data, cli.output_dir / "index",
                                        {"devices": 1, "accelerator": accelerator}, resume=cli.resuming)
    return runs


def paper_tables(metrics: dict, task, dataset: str | None, data=None) -> str:
    """What the paper has for `metrics` of test task `task`: `comparison_table` where `dataset` is `DATASET` (its ORCAS
    rows where data module `data` reads ORCAS), else a line saying so and, for a builtin task, `reported_table`."""
    from common.commands.outputs import is_builtin, nothing_to_compare

    if dataset == DATASET:
        return comparison_table(metrics, orcas=data is not None and bool(data.featurizer.orcas))
    text = nothing_to_compare(task, f"is not {DATASET}, Table 1's dataset (conformer_kernel.evaluate --dataset "
                                    "names it for a task from files)")
    if is_builtin(task):
        text += f"\n\n{reported_table()}"
    return text


def reported_table() -> str:
    """Table 1 of the paper (TREC DL 2020 documents), labelled as another dataset's numbers."""
    from common.report import load_reported, to_markdown

    frame = load_reported(PAPER, table=1).pivot_table(index=["method", "setting"], columns="metric", values="value",
                                                      aggfunc="first", sort=False)
    frame = frame[list(MEASURE_LABELS)].rename(columns=MEASURE_LABELS).reset_index()
    return ("Reported in the paper, for reference only: another dataset (Table 1, TREC DL 2020 documents, official "
            f"evaluation)\n\n{to_markdown(frame)}")


def comparison_table(metrics: dict, orcas: bool = False) -> str:
    """Reproduced vs Table 1 on TREC DL 2020: runs ``ndrm<k>-<mode>`` against the row of that model and subtask."""
    import pandas as pd

    from common.report import load_reported, to_markdown

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


#: This command (`common.commands.train`).
COMMAND = TrainCommand(
    name="conformer_kernel.train", default_config=Path(__file__).parent / "configs" / "builtin.yaml",
    model="conformer_kernel.ranker.ConformerKernelRanker", data="conformer_kernel.data.ConformerKernelDataModule",
    monitor="dev/ndcg_cut_10", run_name=lambda config: f"ck-{config.model.model}",
    tested_name=attrgetter("hparams.model"), paper=PAPER, paper_tables=paper_tables, links=links, labels=MEASURE_LABELS,
    test_modes=TestModes(MODES, "evaluate the best checkpoint by re-ranking the test candidates and/or by full "
                                "retrieval from a precomputed impact index (default: both)", tested_runs, DEPTH),
)

#: Runs the command line (`common.commands.train.TrainCommand.main`).
main = COMMAND.main


if __name__ == "__main__":
    main()
