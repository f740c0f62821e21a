"""``python -m qds.train``: train QDS-Transformer (Jiang, Xiong, Lee, Wang: "Long Document Ranking with
Query-Directed Sparse Transformer", Findings of EMNLP 2020) or a Table 2/4 variant, pick the checkpoint on dev
MRR@10, re-rank the test candidates, write the run and metrics, and print them next to BM25's.

With no ``--config`` the embedded default (`qds/configs/builtin.yaml`) runs: a small QDS trained
from scratch on the built-in collection in a few CPU minutes. ``--config qds/configs/<row>.yaml``
runs one of the paper's rows (TREC DL 2019, MS MARCO documents through ir_datasets). Every
option is a LightningCLI flag (``--model.window 64``, ``--trainer.devices 8``; ``--help``).

Outputs (``--output_dir``, default a new ``outputs/qds-<pattern>-<time>``; `common.commands.cli.RankerCLI`): ``config.yaml``
(resolved), ``checkpoints/`` (``last.ckpt`` and the best on dev), ``logs/metrics.csv`` (training log),
``run.trec``, ``metrics.json`` and ``task.json`` (test; `qds.outputs`, which also says when the paper's Tables 2
and 4 are compared with). ``--ckpt_path last`` resumes the run in ``--output_dir``
at its last checkpoint (mid-epoch included) and ends as the uninterrupted run would.
"""

from __future__ import annotations

from pathlib import Path

from common.commands.help import check_command_line, is_int

#: This command, as ``python -m`` runs it.
COMMAND = "qds.train"
CONFIGS = Path(__file__).parent / "configs"
DEFAULT_CONFIG = CONFIGS / "builtin.yaml"


def check_settings(config: dict) -> str | None:
    """What no single option's type rules out, in the resolved `config` (a ``config.yaml`` as a dict): one line
    naming the option, or None. Checked before anything is built: each would otherwise fail inside the model."""
    model = config.get("model") or {}
    window, heads, hidden, betas = (model.get(k) for k in ("window", "num_heads", "hidden_size", "betas"))
    if is_int(window) and window % 2:
        return f"--model.window: must be even (Longformer's window spans w / 2 each side), got {window}"
    # Only a from-scratch encoder takes these sizes; a pretrained one has its own.
    if model.get("encoder") is None and is_int(heads) and is_int(hidden) and heads > 0 and hidden % heads:
        return f"--model.num_heads: must divide --model.hidden_size ({hidden}), got {heads}"
    if isinstance(betas, (list, tuple)) and all(isinstance(b, (int, float)) for b in betas) \
            and not all(0 <= b < 1 for b in betas):
        return f"--model.betas: each must be at least 0 and below 1 (Adam's), got {list(betas)}"
    return None


def main(args=None) -> dict | None:
    """Run the command line; returns the test metrics (None without a test split).

    ``--help`` and a bad option are answered before Lightning is imported (`common.commands.help`).
    """
    check_command_line(COMMAND, args, DEFAULT_CONFIG, check_settings)
    import torch

    from common.commands.quiet import quiet_lightning

    quiet_lightning()  # Lightning's advertisements and two deprecation warnings of its own making

    from common.report import paper_dataset
    from common.data.rerank import reranked_run
    from qds.cli import QDSCLI
    from qds.outputs import PAPER, metrics_table, paper_tables, write_results

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
                            task=task, dataset=dataset, overwrite=cli.resuming)
    print()
    print(metrics_table(metrics, f"Test queries of {data.source('test').name} ({len(run)}), re-ranking "
                                 f"the top {data.hparams.depth} BM25 candidates"))  # fmt: skip
    print()
    print(paper_tables(metrics, name, task, dataset))
    print(f"\nwritten: {out / 'run.trec'}, {out / 'metrics.json'}, {out / 'task.json'}, {out / 'config.yaml'}, "
          f"{cli.tested_checkpoint or 'the weights after the last step'}")
    return metrics


if __name__ == "__main__":
    main()
