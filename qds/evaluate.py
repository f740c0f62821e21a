"""``python -m qds.evaluate --checkpoint CKPT --task TASK``: re-rank a candidate run with a trained QDS-Transformer
(Jiang et al., "Long Document Ranking with Query-Directed Sparse Transformer", Findings of EMNLP 2020).

``CKPT``: a `qds.train` checkpoint or the official release (`qds.checkpoint`, with ``--encoder`` and
``--tokenizer``). Writes ``run.trec``, ``metrics.json`` and ``task.json`` into ``--output_dir``, re-ranking
``--depth`` candidates (else the checkpoint's ``depth``, else 100), and compares with Tables 2 and 4 where the task is
one of their datasets. Several processes score and gather; rank zero writes. Details: docs/qds.md.
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
from qds import WINDOW
from qds.benchmark import WINDOW_TYPE
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
    official.add_argument("--window", type=WINDOW_TYPE, default=WINDOW,
                          help="its attention window w, even (default %(default)s)")
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


def read_state(path) -> dict:
    """The contents of checkpoint `path`, the official release or a `qds.train` checkpoint, else one line."""
    from qds.checkpoint import is_official

    def trained(state: dict) -> bool:  # a Lightning checkpoint of a model with a pattern
        hyper_parameters = state.get("hyper_parameters")
        return "state_dict" in state and isinstance(hyper_parameters, dict) and "pattern" in hyper_parameters

    return read_checkpoint(path, "a qds.train checkpoint or the official QDS-Transformer release",
                           lambda state: is_official(state) or trained(state))


def checkpoint_settings(args, state: dict) -> tuple[str, dict]:
    """The pattern of checkpoint contents `state` and the data settings it was trained with."""
    from qds.checkpoint import is_official

    if is_official(state):
        return "qds", {"tokenizer": args.tokenizer, "layout": "official"}
    return state["hyper_parameters"]["pattern"], dict(state.get("datamodule_hyper_parameters", {}))


def load_model(args, state: dict | None = None):
    """The `QDSRanker` of `args.checkpoint`; `state`: the checkpoint's contents, if read."""
    from qds.checkpoint import is_official, load_official
    from qds.ranker import QDSRanker

    state = read_state(args.checkpoint) if state is None else state
    if is_official(state):
        model = QDSRanker(pattern="qds", encoder=args.encoder, tokenizer=args.tokenizer, window=args.window,
                          impl=args.impl or "auto")
        return load_official(model, args.checkpoint)
    overrides = {"impl": args.impl} if args.impl else {}
    return QDSRanker.load_from_checkpoint(args.checkpoint, map_location="cpu", **overrides)


def main(argv=None) -> dict | None:
    """Evaluate as the command line says; the metrics on global rank zero (None without qrels or elsewhere)."""
    args = build_parser().parse_args(argv)
    out = fresh_output_dir(args.output_dir, "qds-evaluate")
    task = task_spec_from_args(args)
    refuse_missing_files([task], ["--task"], quiet=not launched_as_global_zero())
    from common.commands.quiet import quiet_lightning
    from common.training.processes import leave_process_group_at_exit

    quiet_lightning()
    leave_process_group_at_exit()

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
        data.check_tasks()
    model = load_model(args, state)
    if launched_as_global_zero():
        print(f"re-ranking the top {depth} candidates per query ({depth_source}); {precision}")
        out.mkdir(parents=True, exist_ok=True)
        write_provenance(out, "qds.evaluate", argv)
    trainer = L.Trainer(**trainer_options(args), logger=False, default_root_dir=out, enable_model_summary=False)
    trainer.test(model, datamodule=data)
    if not trainer.is_global_zero:
        return None
    test = data.source("test")
    run = reranked_run(data.test_pairs(), model.test_scores, test.candidates())
    dataset = args.dataset or paper_dataset(PAPER, task)
    metrics = write_results(out, pattern, run, test.qrels(), test.candidates(), data.tasks.relevance_level,
                            measures=model.measures, task=task, dataset=dataset)
    title = f"{test.name}: {len(run)} queries, top {depth} re-ranked"
    if metrics is None:
        print(f"{title}\n\n{NO_QRELS}\n\nwritten: {out / RUN}, {out / 'task.json'}")
        return None
    print(metrics_table(metrics, title, model.measures))
    print(f"\n{paper_tables(metrics, task, dataset, data)}")
    print(f"\nwritten: {out / RUN}, {out / 'metrics.json'}, {out / 'task.json'}")
    return metrics


if __name__ == "__main__":
    main()
