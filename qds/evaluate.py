"""``python -m qds.evaluate --checkpoint CKPT --task TASK``: re-rank a candidate run with a trained
QDS-Transformer (Jiang, Xiong, Lee, Wang: "Long Document Ranking with Query-Directed Sparse Transformer",
Findings of EMNLP 2020) and compare with the paper.

``CKPT`` is a checkpoint of `qds.train` (``checkpoints/best-*.ckpt``) or the official
QDS-Transformer release (`qds.checkpoint`; give ``--encoder`` for its architecture, e.g.
``allenai/longformer-base-4096``, and ``--tokenizer roberta-base``), read with the official input
layout it was trained on (`qds.inputs`); a `qds.train` checkpoint is read with the layout it was
trained with. ``TASK`` names topics, qrels,
candidates and documents: ``irds:msmarco-document/trec-dl-2019/judged``, ``builtin:test``, or
``--topics/--qrels/--run/--collection`` files, or ``--rank_llm FILE --qrels FILE``. Writes ``run.trec``,
``metrics.json`` (NDCG@10, MAP, MRR@10 with TREC DL conventions; BM25 under ``bm25``) and ``task.json`` (the task
and the paper's dataset it is) into ``--output_dir`` and prints the metrics. Without ``--qrels`` (files or a
rank_llm file) the candidates are re-ranked all the same: ``run.trec`` and ``task.json`` are written, and no
metrics nor comparison (`common.commands.outputs.NO_QRELS`).

Depth: ``--depth`` candidates per query are re-ranked; without it, the checkpoint's data setting
``depth`` (what `qds.train` re-ranked when it reported its test metrics), else 100 (the official
release, re-ranking BM25's top 100 as in Table 2). The command prints which depth and why.

Comparison: with the paper's Tables 2 and 4 (`common.report`) only where the task is one of their
datasets: ``--dataset`` (for files holding one), else the dataset of an ``irds:`` task
(`common.report.paper_dataset`, e.g. ``msmarco-document/trec-dl-2019/judged`` is
``trec-dl-2019-doc``). Any other task gets a line saying there is nothing to compare with, and
``builtin:`` tasks the reported numbers labelled as another dataset's (`qds.train.paper_tables`).

Speed: ``--precision`` (default: the precision the checkpoint's run trained with, where its run folder says so, else
32-true; the scores stay float32), float32 matmuls at ``--matmul_precision high`` (TF32 on GPUs) as in training
(`common.commands.task_options.resolve_precision`), and ``--num_workers`` loader processes that read and tokenise the
candidates while the model scores (pinned memory on a GPU; `common.training.tasks.LoaderConfig`).

Several processes (``--devices N``, ``torchrun``, ``srun``): the candidates are scored by all of them and gathered;
global rank zero alone checks and creates the output folder and writes the files
(`common.commands.task_options.fresh_output_dir`), the same bytes as one process writes.

Bad input ends in one line naming the option or the file (and line), with exit status 2, before anything is
written (`common.refusals`): the options and the task's names at once, before torch and Lightning are imported
(seconds); an ``irds:`` task's files that are neither present nor downloadable, one line each
(`common.data.irds_files`); a checkpoint that is not QDS-Transformer's once read, and a malformed task file once
the task is opened, before the output folder is created.
"""

from __future__ import annotations

import argparse

from common.commands.task_options import (add_precision_arguments, add_process_arguments, add_task_arguments,
                                          add_workers_argument, fresh_output_dir, read_checkpoint, resolve_depth,
                                          resolve_precision, runs_on_cuda, task_spec_from_args, trainer_options)
from common.commands.provenance import write_provenance
from common.commands.run_folder import launched_as_global_zero
from common.data.irds_files import refuse_missing_files
from common.refusals import ArgumentParser, checkpoint_file, input_errors, positive_int
from qds.train import DATASETS, PAPER, paper_tables

#: Candidates re-ranked per query by a checkpoint without data settings: the official release's top 100 (Table 2).
DEFAULT_DEPTH = 100


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="python -m qds.evaluate", description=__doc__.split("\n\n")[0],
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, type=checkpoint_file,
                        help="a qds.train checkpoint or the official release")
    add_task_arguments(parser, "task to re-rank: builtin:<split> or irds:<ir_datasets id>")
    parser.add_argument("--output_dir", help="default: a new outputs/qds-evaluate-<time>")
    parser.add_argument("--depth", type=positive_int, default=None,
                        help="candidates re-ranked per query (default: the checkpoint's data.depth, else 100)")
    parser.add_argument("--batch_size", type=positive_int, default=16, help="pairs per batch (default 16)")
    parser.add_argument("--impl", default=None, type=_implementation, metavar="IMPL",
                        help="sparse attention implementation (default: the checkpoint's)")
    parser.add_argument("--dataset", default=None, choices=DATASETS,
                        help="the paper's dataset the task is, to compare with (default: an irds: task's own, if the "
                             "paper reports it; files and builtin: none)")
    parser.add_argument("--relevance_level", type=int, default=None,
                        help="lowest relevant label for MAP/MRR (default: the checkpoint's data setting, else 1)")
    official = parser.add_argument_group("official checkpoint")
    official.add_argument("--encoder", default="allenai/longformer-base-4096", help="its encoder (name or path)")
    official.add_argument("--tokenizer", default="roberta-base", help="its tokenizer (name or path)")
    official.add_argument("--window", type=_window, default=128, help="its attention window w, even (default 128)")
    add_process_arguments(parser)
    add_precision_arguments(parser)
    add_workers_argument(parser, "read and tokenise the candidates")
    return parser


def _implementation(text: str) -> str:
    """An argparse type: one of ``python -m qds.train --model.impl``'s choices (torch is imported only for it)."""
    from common.kernels import IMPLEMENTATIONS

    choices = ("auto", *IMPLEMENTATIONS)
    if text not in choices:
        raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from {', '.join(map(repr, choices))})")
    return text


def _window(text: str) -> int:
    """An argparse type: Longformer's attention window, a positive even integer (it spans w / 2 each side)."""
    window = positive_int(text)
    if window % 2:
        raise argparse.ArgumentTypeError(f"must be even (Longformer's window spans w / 2 each side), got {text}")
    return window


def read_state(path) -> dict:
    """The contents of checkpoint `path`, the official release or a `qds.train` checkpoint; any other file ends
    the command in one line naming it."""
    from qds.checkpoint import is_official

    return read_checkpoint(path, "a qds.train checkpoint or the official QDS-Transformer release",
                           lambda state: is_official(state) or _trained(state))


def _trained(state: dict) -> bool:
    """Whether checkpoint contents `state` are `qds.train`'s: a Lightning checkpoint of a model with a pattern."""
    hyper_parameters = state.get("hyper_parameters")
    return "state_dict" in state and isinstance(hyper_parameters, dict) and "pattern" in hyper_parameters


def checkpoint_settings(args, state: dict) -> tuple[str, dict]:
    """The pattern of checkpoint contents `state` and the data settings it was trained with: the official
    release's (qds; it holds none but its tokenizer, ``--tokenizer``) or those `qds.train` saved."""
    from qds.checkpoint import is_official

    if is_official(state):
        return "qds", {"tokenizer": args.tokenizer, "layout": "official"}
    settings = dict(state.get("datamodule_hyper_parameters", {}))
    settings.setdefault("layout", "sos")  # checkpoints from before the official layout were trained on this one
    return state["hyper_parameters"]["pattern"], settings


def load_model(args, state: dict | None = None):
    """The `qds.ranker.QDSRanker` of `args.checkpoint` and the data settings it was trained with; `state`: the
    checkpoint's contents, where read already (`read_state`)."""
    from qds.checkpoint import is_official, load_official
    from qds.ranker import QDSRanker

    state = read_state(args.checkpoint) if state is None else state
    _, data_settings = checkpoint_settings(args, state)
    if is_official(state):
        model = QDSRanker(pattern="qds", encoder=args.encoder, tokenizer=args.tokenizer, window=args.window,
                               impl=args.impl or "auto")
        return load_official(model, args.checkpoint), data_settings
    overrides = {"impl": args.impl} if args.impl else {}
    return QDSRanker.load_from_checkpoint(args.checkpoint, map_location="cpu", **overrides), data_settings


def main(argv=None) -> dict | None:
    """Evaluate as the command line says; returns the metrics on global rank zero (None without qrels), None on the
    other processes."""
    args = build_parser().parse_args(argv)
    out = fresh_output_dir(args.output_dir, "qds-evaluate")
    task = task_spec_from_args(args)
    refuse_missing_files([task], ["--task"], quiet=not launched_as_global_zero())
    from common.commands.quiet import quiet_lightning
    from common.training.processes import leave_process_group_at_exit

    quiet_lightning()  # Lightning's advertisements and two deprecation warnings of its own making
    leave_process_group_at_exit()  # a gloo group left standing can abort the process at exit

    import lightning as L

    from common.commands.cli import INPUT_ERRORS
    from common.commands.outputs import NO_QRELS, RUN, metrics_table, write_results
    from common.data.rerank import reranked_run
    from common.report import paper_dataset
    from qds.data import QDSDataModule

    state = read_state(args.checkpoint)
    pattern, data_settings = checkpoint_settings(args, state)
    keep = ("tokenizer_task", "tokenizer", "max_length", "max_sentences", "max_passages", "layout", "relevance_level")
    settings = {k: v for k, v in data_settings.items() if k in keep}
    if args.relevance_level is not None:
        settings["relevance_level"] = args.relevance_level
    depth, depth_source = resolve_depth(args.depth, data_settings, DEFAULT_DEPTH)
    precision = resolve_precision(args, args.checkpoint, state, runs_on_cuda(args.accelerator))
    data = QDSDataModule(train=None, dev=None, test=task, pattern=pattern, depth=depth,
                         eval_batch_size=args.batch_size, num_workers=args.num_workers, **settings)
    with input_errors(*INPUT_ERRORS):
        data.check_tasks()  # the task's files read before anything is built, printed or written
    model, _ = load_model(args, state)
    if launched_as_global_zero():
        print(f"re-ranking the top {depth} candidates per query ({depth_source}); {precision}")
        out.mkdir(parents=True, exist_ok=True)
        write_provenance(out, "qds.evaluate", argv)
    trainer = L.Trainer(**trainer_options(args), logger=False, default_root_dir=out, enable_model_summary=False)
    trainer.test(model, datamodule=data)
    if not trainer.is_global_zero:  # the scores are gathered on every process; rank zero writes them
        return None
    run = reranked_run(data.test_pairs(), model.test_scores, data.candidates("test"))
    dataset = args.dataset or paper_dataset(PAPER, task)
    metrics = write_results(out, pattern, run, data.qrels("test"), data.candidates("test"), data.relevance_level,
                            measures=model.measures, task=task, dataset=dataset)  # fmt: skip
    title = f"{data.source('test').name}: {len(run)} queries, top {depth} re-ranked"
    if metrics is None:
        print(f"{title}\n\n{NO_QRELS}\n\nwritten: {out / RUN}, {out / 'task.json'}")
        return None
    print(metrics_table(metrics, title, model.measures))
    print()
    print(paper_tables(metrics, task, dataset, data))
    print(f"\nwritten: {out / RUN}, {out / 'metrics.json'}, {out / 'task.json'}")
    return metrics


if __name__ == "__main__":
    main()
