"""``python -m earl.train``: train EARL (Gao, Dai, Callan: "EARL: Speedup Transformer-based Rankers with
Pre-computed Representation", 2020) or a Table 2 baseline, pick the checkpoint on dev MRR@10, re-rank the test
candidates, write the run and metrics, and print them next to BM25's.

With no ``--config`` the embedded default (`earl/configs/builtin.yaml`) runs: a small EARL (ClsPool, tied) trained
from scratch on the built-in collection, then a BERT ranker of the same size trained the same way
(``--compare_with bert_ranker``), in a few CPU minutes. ``--config earl/configs/<row>.yaml`` runs one of the paper's
rows (MS MARCO passages through ir_datasets, from ``bert-base-uncased``; Tables 2, 4 and 5, and the ClueWeb09-B
transfer); ``earl/configs/trec-dl-passages-minilm.yaml`` trains on TREC DL 2020 passages from the offline MiniLM
and tests on DL 2019 (results/earl/README.md). Every option is a LightningCLI flag (``--model.pool mean``, ``--model.tied true``,
``--model.num_blocks 3``, ``--trainer.devices 8``; ``--help``).

Outputs (``--output_dir``, default a new ``outputs/earl-<variant>-<time>``; `common.commands.cli.RankerCLI`): ``config.yaml``
(resolved), ``checkpoints/`` (``last.ckpt`` and the best on dev), ``logs/metrics.csv``, ``run.trec``,
``metrics.json`` (with BM25's and each ``--compare_with`` baseline's, trained in ``<output_dir>/<baseline>/``) and
``task.json`` (`earl.outputs`). ``--ckpt_path last`` resumes the run in ``--output_dir`` (its baselines too).
A trained checkpoint's document representations are precomputed by ``python -m earl.index`` and re-used by
``python -m earl.evaluate --store``.
"""

from __future__ import annotations

from pathlib import Path

from common.commands.help import check_command_line, is_int

#: This command, as ``python -m`` runs it.
COMMAND = "earl.train"
CONFIGS = Path(__file__).parent / "configs"
DEFAULT_CONFIG = CONFIGS / "builtin.yaml"


def check_settings(config: dict) -> str | None:
    """What no single option's type rules out, in the resolved `config` (a ``config.yaml`` as a dict): one line
    naming the option, or None. Checked before anything is built: each would otherwise fail inside the model."""
    model = config.get("model") or {}
    heads, hidden, layers, query_layers = (model.get(k) for k in ("num_heads", "hidden_size", "num_layers",
                                                                  "query_layers"))  # fmt: skip
    if model.get("encoder") is None:  # a pretrained encoder has its own sizes
        if is_int(heads) and is_int(hidden) and heads > 0 and hidden % heads:
            return f"--model.num_heads: must divide --model.hidden_size ({hidden}), got {heads}"
        if is_int(query_layers) and is_int(layers) and query_layers > layers:
            return f"--model.query_layers: T_qry takes at most T_doc's {layers} layers (--model.num_layers), " \
                   f"got {query_layers}"
        if model.get("architecture", "earl") == "earl" and query_layers is None and is_int(layers) \
                and is_int(model.get("num_blocks")) and model["num_blocks"] > layers:
            return f"--model.num_blocks: l = L - K needs K at most --model.num_layers ({layers}), " \
                   f"got {model['num_blocks']}"
    data = config.get("data") or {}
    for option in ("query_length", "passage_length"):
        if is_int(data.get(option)) and data[option] < 3:
            return f"--data.{option}: must leave room for [CLS], a token and [SEP] (at least 3), got {data[option]}"
    for name in config.get("compare_with") or []:
        if name not in ("bert_ranker", "bert_siamese"):
            return f"--compare_with: must list bert_ranker and/or bert_siamese, got {name}"
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
    from common.commands.outputs import metrics_table, write_results
    from earl.cli import EARLCLI
    from earl.outputs import PAPER, paper_tables
    from earl.ranker import MEASURES

    torch.set_float32_matmul_precision("high")
    cli = EARLCLI(args)
    model, data, out = cli.model, cli.datamodule, cli.output_dir
    if not cli.fit_and_test():  # no test split, or not global rank zero
        return None
    run = reranked_run(data.test_pairs(), model.test_scores, data.candidates("test"))
    others = {}
    for baseline in cli.config.compare_with:
        others.update({k: v for k, v in train_baseline(out, baseline).items() if k != "bm25"})
    task = data.specs["test"]
    dataset = paper_dataset(PAPER, task)
    metrics = write_results(out, model.name, run, data.qrels("test"), data.candidates("test"), data.relevance_level,
                            measures=MEASURES, task=task, dataset=dataset, others=others, overwrite=cli.resuming)
    print()
    print(metrics_table(metrics, f"Test queries of {data.source('test').name} ({len(run)}), re-ranking "
                                 f"the top {data.hparams.depth} BM25 candidates", MEASURES))  # fmt: skip
    print()
    print(paper_tables(metrics, task, dataset))
    print(f"\nwritten: {out / 'run.trec'}, {out / 'metrics.json'}, {out / 'task.json'}, {out / 'config.yaml'}, "
          f"{cli.tested_checkpoint or 'the weights after the last step'}")
    return metrics


def train_baseline(output_dir: Path, architecture: str) -> dict:
    """The test metrics of `architecture` trained with the settings of ``output_dir/config.yaml`` into
    ``output_dir/<architecture>/``: read when that run finished, resumed when it started, else trained."""
    import json

    from common.commands.run_folder import CONFIG, FINISHED

    folder = output_dir / architecture
    if (folder / FINISHED).is_file():
        return json.loads((folder / FINISHED).read_text())
    if (folder / CONFIG).is_file():
        args = ["--ckpt_path", "last", "--output_dir", str(folder)]
    else:
        args = ["--config", str(output_dir / CONFIG), "--model.architecture", architecture, "--compare_with", "[]",
                "--output_dir", str(folder)]  # fmt: skip
    print(f"\ntraining the {architecture} baseline the same way into {folder}")
    return main(args)


if __name__ == "__main__":
    main()
