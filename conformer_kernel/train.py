"""``python -m conformer_kernel.train``: train NDRM1, NDRM2 or NDRM3, the Conformer-Kernel with query term
independence (Mitra et al.: "Improving Transformer-Kernel Ranking Model Using Conformer and Query Term
Independence", TREC 2020 Deep Learning track), then re-rank and fully retrieve the test queries.

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

from common.commands.help import check_command_line, is_int

#: This command, as ``python -m`` runs it.
COMMAND = "conformer_kernel.train"
DEFAULT_CONFIG = Path(__file__).parent / "configs" / "builtin.yaml"
#: How the best checkpoint is tested (``--test_modes``; see the module docstring).
MODES = ("rerank", "fullrank")


def check_settings(config: dict) -> str | None:
    """What no single option's type rules out, in the resolved `config` (a ``config.yaml`` as a dict): one line
    naming the option, or None. Checked before anything is built: each would otherwise fail inside the model."""
    model, data = config.get("model") or {}, config.get("data") or {}
    if model.get("model") == "ndrm2":  # explicit matching only: no encoder
        return None
    heads, dim, window = model.get("heads"), data.get("embedding_dim"), model.get("conv_window")
    if is_int(heads) and is_int(dim) and heads > 0 and 2 * dim % heads:
        return f"--model.heads: must divide the hidden size {2 * dim} (2 x --data.embedding_dim), got {heads}"
    if model.get("encoder") == "conformer" and is_int(window) and window % 2 == 0:
        return f"--model.conv_window: must be odd (the convolution keeps the document's length), got {window}"
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
    from conformer_kernel.cli import ConformerKernelCLI
    from conformer_kernel.impact_index import full_ranking
    from conformer_kernel.outputs import PAPER, metrics_table, paper_tables, write_results

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
                                        {"devices": 1, "accelerator": accelerator}, resume=cli.resuming)
    name = model.hparams.model
    task = data.specs["test"]
    dataset = paper_dataset(PAPER, task)
    metrics = write_results(out, name, runs, data.qrels("test"), data.candidates("test"), data.relevance_level,
                            task=task, dataset=dataset, overwrite=cli.resuming)
    print()
    print(metrics_table(metrics, f"Test queries of {data.source('test').name} ({len(data.eval_queries('test'))})"))
    print()
    print(paper_tables(metrics, task, dataset, orcas=bool(data.featurizer.orcas)))
    print(f"\nwritten: {', '.join(str(out / f'run.{m}.trec') for m in runs)}, {out / 'metrics.json'}, "
          f"{out / 'task.json'}, {cli.tested_checkpoint or 'the weights after the last step'}")
    return metrics


if __name__ == "__main__":
    main()
