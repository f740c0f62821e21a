"""``python -m qds.train``: train QDS-Transformer (or a Table 2/4 variant), pick the checkpoint on dev
MRR@10, re-rank the test candidates, write the run and metrics, and print them next to BM25's.

With no ``--config`` the embedded default (`qds/configs/builtin.yaml`) runs: a small QDS trained
from scratch on the built-in collection in a few CPU minutes. ``--config qds/configs/<row>.yaml``
runs one of the paper's rows (TREC DL 2019, MS MARCO documents through ir_datasets). Every
option is a LightningCLI flag (``--model.window 64``, ``--trainer.devices 8``; ``--help``).

Outputs (``--output_dir``, default a new ``outputs/qds-<pattern>-<time>``): ``config.yaml``
(resolved), ``checkpoints/`` (``last.ckpt`` and the best on dev), ``logs/metrics.csv`` (training log),
``run.trec`` and ``metrics.json`` (test). ``--ckpt_path last`` resumes the run in ``--output_dir``
at its last checkpoint (mid-epoch included) and ends as the uninterrupted run would.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.utilities import rank_zero_info

from common.io import atomic_write
from qds.data import QDSDataModule
from qds.model import QDSTransformer
from qds.outputs import metrics_table, reported_table, reranked_run, write_results

CONFIGS = Path(__file__).parent / "configs"
DEFAULT_CONFIG = CONFIGS / "builtin.yaml"
#: Logged dev measure that selects the checkpoint (the paper's model selection, Sec. 5).
MONITOR = "dev/mrr@10"


class QDSCLI(LightningCLI):
    """LightningCLI with the output-folder and resume conventions of the repository (README)."""

    def __init__(self, args=None, **kwargs):
        given = sys.argv[1:] if args is None else args
        defaults = [] if any(a == "--config" or a.startswith("--config=") for a in given) else [str(DEFAULT_CONFIG)]
        super().__init__(
            QDSTransformer, QDSDataModule, args=args, run=False, save_config_callback=None,
            seed_everything_default=0, parser_kwargs={"default_config_files": defaults}, **kwargs,
        )  # fmt: skip

    def add_arguments_to_parser(self, parser) -> None:
        parser.add_argument("--output_dir", type=str | None, default=None,
                            help="folder for config, checkpoints, run and metrics (default: new outputs/qds-...)")
        parser.add_argument("--ckpt_path", type=str | None, default=None,
                            help="'last' resumes the run in --output_dir; or a checkpoint file to start from")
        parser.add_argument("--save_every_n_steps", type=int, default=100,
                            help="write checkpoints/last.ckpt every this many training steps (for --ckpt_path last)")
        parser.link_arguments("model.pattern", "data.pattern")
        parser.link_arguments("data.tokenizer", "model.tokenizer")
        parser.link_arguments("data.max_length", "model.max_length")

    def before_instantiate_classes(self) -> None:
        config = self.config
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.output_dir = Path(config.output_dir or f"outputs/qds-{config.model.pattern}-{stamp}")
        self.resume_from = None
        if config.ckpt_path == "last":
            if config.output_dir is None:
                raise SystemExit("--ckpt_path last resumes a run: give its --output_dir")
            self.resume_from = self.output_dir / "checkpoints" / "last.ckpt"
            if not self.resume_from.is_file():
                raise SystemExit(f"nothing to resume: {self.resume_from} does not exist")
        else:
            if self.output_dir.exists() and any(self.output_dir.iterdir()):
                raise SystemExit(
                    f"{self.output_dir} is not empty: choose a new --output_dir, or pass --ckpt_path last to resume"
                )
            self.resume_from = config.ckpt_path
        self.output_dir.mkdir(parents=True, exist_ok=True)
        rank_zero_info(f"output folder: {self.output_dir}")

    def instantiate_trainer(self, **kwargs):
        folder = self.output_dir / "checkpoints"
        # The best on dev, saved when validation ends; and last.ckpt every few steps, to resume from.
        self.checkpoint = ModelCheckpoint(dirpath=folder, filename="best-{step}", monitor=MONITOR, mode="max")
        last = ModelCheckpoint(dirpath=folder, save_top_k=0, save_last=True,
                               every_n_train_steps=self.config.save_every_n_steps)
        configured = self.config_init.trainer.get("callbacks") or []
        kwargs.update(
            default_root_dir=str(self.output_dir),
            logger=CSVLogger(self.output_dir, name="logs", version=""),
            callbacks=[*configured, self.checkpoint, last],
        )
        return super().instantiate_trainer(**kwargs)


def main(args=None) -> dict | None:
    """Run the command line; returns the test metrics (None without a test split)."""
    torch.set_float32_matmul_precision("high")
    cli = QDSCLI(args)
    trainer, model, data, out = cli.trainer, cli.model, cli.datamodule, cli.output_dir
    if trainer.is_global_zero and not (out / "config.yaml").exists():
        with atomic_write(out / "config.yaml") as f:
            f.write(cli.parser.dump(cli.config))
    trainer.fit(model, datamodule=data, ckpt_path=cli.resume_from)
    if not data.has_split("test"):
        return None
    best = cli.checkpoint.best_model_path or cli.checkpoint.last_model_path or None
    trainer.test(model, datamodule=data, ckpt_path=best)
    if not trainer.is_global_zero:
        return None
    name = model.hparams.pattern
    run = reranked_run(data.test_pairs(), model.test_scores, data.candidates("test"))
    metrics = write_results(out, name, run, data.qrels("test"), data.candidates("test"), data.relevance_level)
    print()
    print(metrics_table(metrics, f"Test queries of {data.source('test').name} ({len(run)}), re-ranking "
                                 f"the top {data.hparams.depth} BM25 candidates"))  # fmt: skip
    print()
    print(reported_table(name))
    print(f"\nwritten: {out / 'run.trec'}, {out / 'metrics.json'}, {out / 'config.yaml'}, {best}")
    return metrics


if __name__ == "__main__":
    main()
