"""``python -m conformer_kernel.train``: train NDRM1, NDRM2 or NDRM3, then re-rank and fully retrieve the test queries.

With no ``--config`` the embedded default (`conformer_kernel/configs/builtin.yaml`) trains NDRM3
on the built-in collection in a few CPU minutes. ``--config conformer_kernel/configs/<row>.yaml``
runs one of Table 1's settings on TREC DL 2020 (MS MARCO documents through ir_datasets; ``-orcas``
adds the ORCAS field; ``-rerank`` / ``-fullrank`` pick the evaluated setting). Every option is a
LightningCLI flag (``--model.model ndrm1``, ``--trainer.devices 4``; ``--help``).

After training, the checkpoint chosen on dev NDCG@10 is evaluated in each of ``--test_modes``:
``rerank`` scores the test candidates (BM25's top 100); ``fullrank`` precomputes s_td for the test
queries' terms over the whole test collection (`conformer_kernel.index`, into ``index/``) and
retrieves each query's top 100 from it, the paper's single-stage retrieval.

Outputs (``--output_dir``, default a new ``outputs/ck-<model>-<time>``): ``config.yaml``,
``checkpoints/``, ``logs/metrics.csv``, ``run.rerank.trec``, ``run.fullrank.trec``, ``index/``,
``metrics.json`` (with BM25's) and ``task.json`` (`conformer_kernel.outputs`, which also says when Table 1 is
compared with). ``--ckpt_path last`` resumes the run in ``--output_dir``.
"""

from __future__ import annotations

from pathlib import Path

import torch

from common.cli import RankerCLI
from common.report import paper_dataset
from common.rerank import reranked_run
from conformer_kernel.data import ConformerKernelData
from conformer_kernel.index import full_ranking
from conformer_kernel.outputs import PAPER, metrics_table, paper_tables, write_results
from conformer_kernel.ranker import ConformerKernel

DEFAULT_CONFIG = Path(__file__).parent / "configs" / "builtin.yaml"
MONITOR = "dev/ndcg_cut_10"
MODES = ("rerank", "fullrank")


class ConformerKernelCLI(RankerCLI):
    def __init__(self, args=None, **kwargs):
        super().__init__(ConformerKernel, ConformerKernelData, default_config=DEFAULT_CONFIG,
                         run_name=lambda config: f"ck-{config.model.model}", monitor=MONITOR, args=args, **kwargs)

    def add_arguments_to_parser(self, parser) -> None:
        super().add_arguments_to_parser(parser)
        parser.add_argument("--test_modes", type=list[str], default=list(MODES),
                            help="evaluate the best checkpoint by re-ranking the test candidates and/or by full "
                                 "retrieval from a precomputed impact index (default: both)")
        parser.link_arguments("data.max_doc_terms", "model.max_doc_terms")
        # The embedding layer starts from word2vec's IN ‖ OUT vectors: hidden = 2 x word2vec dim.
        parser.link_arguments("data.embedding_dim", "model.hidden", compute_fn=lambda dim: 2 * dim)
        parser.link_arguments("data", "model.vocab_size", apply_on="instantiate", compute_fn=lambda d: d.vocab_size)

    def before_instantiate_classes(self) -> None:
        unknown = set(self.config.test_modes) - set(MODES)
        if unknown:
            raise SystemExit(f"unknown --test_modes {sorted(unknown)}: expected {', '.join(MODES)}")
        super().before_instantiate_classes()


def main(args=None) -> dict | None:
    """Run the command line; returns the test metrics (None without a test split)."""
    torch.set_float32_matmul_precision("high")
    cli = ConformerKernelCLI(args)
    model, data, out = cli.model, cli.datamodule, cli.output_dir
    if not cli.fit_and_test():  # no test split, or not global rank zero; else `model` holds the best weights
        return None
    modes = cli.config.test_modes
    runs = {}
    if "rerank" in modes:
        runs["rerank"] = reranked_run(data.test_pairs(), model.test_scores, data.candidates("test"))
    if "fullrank" in modes:
        accelerator = "gpu" if model.device.type == "cuda" else "cpu"
        runs["fullrank"] = full_ranking(model.eval(), data.featurizer, data, out / "index",
                                        {"devices": 1, "accelerator": accelerator})
    name = model.hparams.model
    task = data.specs["test"]
    dataset = paper_dataset(PAPER, task)
    metrics = write_results(out, name, runs, data.qrels("test"), data.candidates("test"), data.relevance_level,
                            task=task, dataset=dataset)
    print()
    print(metrics_table(metrics, f"Test queries of {data.source('test').name} ({len(data.eval_queries('test'))})"))
    print()
    print(paper_tables(metrics, task, dataset, orcas=bool(data.featurizer.orcas)))
    print(f"\nwritten: {', '.join(str(out / f'run.{m}.trec') for m in runs)}, {out / 'metrics.json'}, "
          f"{out / 'task.json'}, {cli.tested_checkpoint}")
    return metrics


if __name__ == "__main__":
    main()
