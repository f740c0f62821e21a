"""``python -m qds.train``: train QDS-Transformer (or a Table 2/4 variant), pick the checkpoint on dev
MRR@10, re-rank the test candidates, write the run and metrics, and print them next to BM25's.

With no ``--config`` the embedded default (`qds/configs/builtin.yaml`) runs: a small QDS trained
from scratch on the built-in collection in a few CPU minutes. ``--config qds/configs/<row>.yaml``
runs one of the paper's rows (TREC DL 2019, MS MARCO documents through ir_datasets). Every
option is a LightningCLI flag (``--model.window 64``, ``--trainer.devices 8``; ``--help``).

Outputs (``--output_dir``, default a new ``outputs/qds-<pattern>-<time>``; `common.cli.RankerCLI`): ``config.yaml``
(resolved), ``checkpoints/`` (``last.ckpt`` and the best on dev), ``logs/metrics.csv`` (training log),
``run.trec``, ``metrics.json`` and ``task.json`` (test; `qds.outputs`, which also says when the paper's Tables 2
and 4 are compared with). ``--ckpt_path last`` resumes the run in ``--output_dir``
at its last checkpoint (mid-epoch included) and ends as the uninterrupted run would.
"""

from __future__ import annotations

from pathlib import Path

import torch

from common.cli import RankerCLI
from common.report import paper_dataset
from common.rerank import reranked_run
from qds.data import QDSDataModule, resolved_tokenizer_task
from qds.model import QDSTransformer
from qds.outputs import PAPER, metrics_table, paper_tables, write_results

CONFIGS = Path(__file__).parent / "configs"
DEFAULT_CONFIG = CONFIGS / "builtin.yaml"
#: Logged dev measure that selects the checkpoint (the paper's model selection, Sec. 5).
MONITOR = "dev/mrr@10"


def _run_name(config) -> str:
    """``qds-<pattern>``: the default output folder is ``outputs/qds-<pattern>-<time>``."""
    return f"qds-{config.model.pattern}"


class QDSCLI(RankerCLI):
    """`common.cli.RankerCLI` for QDS-Transformer: the data module gets the model's pattern, the model its inputs'."""

    def __init__(self, args=None, **kwargs):
        super().__init__(
            QDSTransformer, QDSDataModule, default_config=DEFAULT_CONFIG, run_name=_run_name, monitor=MONITOR,
            args=args, **kwargs,
        )  # fmt: skip

    def add_arguments_to_parser(self, parser) -> None:
        super().add_arguments_to_parser(parser)
        parser.link_arguments("model.pattern", "data.pattern")
        parser.link_arguments("data.tokenizer", "model.tokenizer")
        parser.link_arguments(("data.tokenizer", "data.tokenizer_task", "data.train"), "model.tokenizer_task",
                              compute_fn=resolved_tokenizer_task)
        parser.link_arguments("data.max_length", "model.max_length")


def main(args=None) -> dict | None:
    """Run the command line; returns the test metrics (None without a test split)."""
    torch.set_float32_matmul_precision("high")
    cli = QDSCLI(args)
    model, data, out = cli.model, cli.datamodule, cli.output_dir
    if not cli.fit_and_test():  # no test split, or not global rank zero
        return None
    name = model.hparams.pattern
    run = reranked_run(data.test_pairs(), model.test_scores, data.candidates("test"))
    task = data.specs["test"]
    dataset = paper_dataset(PAPER, task)
    metrics = write_results(out, name, run, data.qrels("test"), data.candidates("test"), data.relevance_level,
                            task=task, dataset=dataset)
    print()
    print(metrics_table(metrics, f"Test queries of {data.source('test').name} ({len(run)}), re-ranking "
                                 f"the top {data.hparams.depth} BM25 candidates"))  # fmt: skip
    print()
    print(paper_tables(metrics, name, task, dataset))
    print(f"\nwritten: {out / 'run.trec'}, {out / 'metrics.json'}, {out / 'task.json'}, {out / 'config.yaml'}, "
          f"{cli.tested_checkpoint}")
    return metrics


if __name__ == "__main__":
    main()
