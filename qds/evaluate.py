"""``python -m qds.evaluate --checkpoint CKPT --candidates TASK``: re-rank a candidate run with a trained model.

``CKPT`` is a checkpoint of `qds.train` (``checkpoints/best-*.ckpt``) or the official
QDS-Transformer release (`qds.checkpoint`; give ``--encoder`` for its architecture, e.g.
``allenai/longformer-base-4096``, and ``--tokenizer roberta-base``). ``TASK`` names topics, qrels,
candidates and documents: ``irds:msmarco-document/trec-dl-2019/judged``, ``builtin:test``, or
``--topics/--qrels/--run/--collection`` files. Writes ``run.trec``, ``metrics.json`` (NDCG@10,
MAP, MRR@10 with TREC DL conventions; BM25 under ``bm25``) and ``task.json`` (the task and the
paper's dataset it is) into ``--output_dir`` and prints the metrics.

Depth: ``--depth`` candidates per query are re-ranked; without it, the checkpoint's data setting
``depth`` (what `qds.train` re-ranked when it reported its test metrics), else 100 (the official
release, re-ranking BM25's top 100 as in Table 2). The command prints which depth and why.

Comparison: with the paper's Tables 2 and 4 (`common.report`) only where the task is one of their
datasets: ``--dataset`` (for files holding one), else the dataset of an ``irds:`` task
(`common.report.paper_dataset`, e.g. ``msmarco-document/trec-dl-2019/judged`` is
``trec-dl-2019-doc``). Any other task gets a line saying there is nothing to compare with, and
``builtin:`` tasks the reported numbers labelled as another dataset's (`qds.outputs.paper_tables`).
"""

from __future__ import annotations

import argparse

import lightning as L
import torch

from common.cli import fresh_output_dir
from common.report import paper_dataset
from common.rerank import reranked_run
from common.tasks import add_task_arguments, resolve_depth, task_spec_from_args
from qds.data import QDSDataModule
from qds.model import QDSTransformer
from qds.outputs import DATASETS, PAPER, metrics_table, paper_tables, write_results

#: Candidates re-ranked per query by a checkpoint without data settings: the official release's top 100 (Table 2).
DEFAULT_DEPTH = 100


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m qds.evaluate", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, help="a qds.train checkpoint or the official release")
    add_task_arguments(parser, "candidates", "task to re-rank: builtin:<split> or irds:<ir_datasets id>")
    parser.add_argument("--output_dir", help="default: a new outputs/qds-evaluate-<time>")
    parser.add_argument("--depth", type=int, default=None,
                        help="candidates re-ranked per query (default: the checkpoint's data.depth, else 100)")
    parser.add_argument("--batch_size", type=int, default=16, help="pairs per batch (default 16)")
    parser.add_argument("--impl", default=None, help="sparse attention implementation (default: the checkpoint's)")
    parser.add_argument("--dataset", default=None, choices=DATASETS,
                        help="the paper's dataset the task is, to compare with (default: an irds: task's own, if the "
                             "paper reports it; files and builtin: none)")
    parser.add_argument("--relevance_level", type=int, default=None,
                        help="lowest relevant label for MAP/MRR (default: the checkpoint's data setting, else 1)")
    official = parser.add_argument_group("official checkpoint")
    official.add_argument("--encoder", default="allenai/longformer-base-4096", help="its encoder (name or path)")
    official.add_argument("--tokenizer", default="roberta-base", help="its tokenizer (name or path)")
    official.add_argument("--window", type=int, default=128, help="its attention window w (default 128)")
    parser.add_argument("--devices", default="auto", help="Lightning devices (default auto)")
    return parser


def load_model(args) -> tuple[QDSTransformer, dict]:
    """The model of `args.checkpoint` and the data settings it was trained with."""
    from qds.checkpoint import is_official, load_official

    state = torch.load(args.checkpoint, map_location="cpu", weights_only=True)
    if is_official(state):
        model = QDSTransformer(pattern="qds", encoder=args.encoder, tokenizer=args.tokenizer, window=args.window,
                               impl=args.impl or "auto")
        return load_official(model, args.checkpoint), {"tokenizer": args.tokenizer}
    overrides = {"impl": args.impl} if args.impl else {}
    model = QDSTransformer.load_from_checkpoint(args.checkpoint, map_location="cpu", **overrides)
    return model, dict(state.get("datamodule_hyper_parameters", {}))


def main(argv=None) -> dict:
    args = build_parser().parse_args(argv)
    out = fresh_output_dir(args.output_dir, "qds-evaluate")
    task = task_spec_from_args(args, "candidates", required=("topics", "run"))
    model, data_settings = load_model(args)
    keep = ("tokenizer_task", "tokenizer", "max_length", "max_sentences", "max_passages", "relevance_level")
    settings = {k: v for k, v in data_settings.items() if k in keep}
    if args.relevance_level is not None:
        settings["relevance_level"] = args.relevance_level
    depth, depth_source = resolve_depth(args.depth, data_settings, DEFAULT_DEPTH)
    print(f"re-ranking the top {depth} candidates per query ({depth_source})")
    data = QDSDataModule(train=None, dev=None, test=task, pattern=model.hparams.pattern,
                         depth=depth, eval_batch_size=args.batch_size, **settings)
    out.mkdir(parents=True, exist_ok=True)
    trainer = L.Trainer(devices=args.devices, logger=False, default_root_dir=out, enable_model_summary=False)
    trainer.test(model, datamodule=data)
    name = model.hparams.pattern
    run = reranked_run(data.test_pairs(), model.test_scores, data.candidates("test"))
    dataset = args.dataset or paper_dataset(PAPER, task)
    metrics = write_results(out, name, run, data.qrels("test"), data.candidates("test"), data.relevance_level,
                            task=task, dataset=dataset)
    print(metrics_table(metrics, f"{data.source('test').name}: {len(run)} queries, top {depth} re-ranked"))
    print()
    print(paper_tables(metrics, name, task, dataset))
    print(f"\nwritten: {out / 'run.trec'}, {out / 'metrics.json'}, {out / 'task.json'}")
    return metrics


if __name__ == "__main__":
    main()
