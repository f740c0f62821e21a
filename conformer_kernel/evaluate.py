"""``python -m conformer_kernel.evaluate --checkpoint CKPT --task TASK``: re-rank (``--modes rerank``, the top
``--depth``) and/or fully retrieve (``--modes fullrank``, the top 100 from an impact index built into
``OUTPUT_DIR/index`` or read from ``--index``) with a trained NDRM, and compare with Table 1 of Mitra et al.,
"Improving Transformer-Kernel Ranking Model Using Conformer and Query Term Independence" (TREC 2020).

``TASK``: ``irds:msmarco-document/trec-dl-2020/judged``, ``builtin:test``, ``--topics/--qrels/--run/--collection``
files, or ``--rank_llm FILE --qrels FILE``. Writes ``run.<mode>.trec``, ``task.json`` and, with qrels, ``metrics.json``
(Table 1's NDCG@10, NCG@100, AP, RR; BM25 under ``bm25``). Depth: ``--depth``, else the checkpoint's data setting,
else 100. Table 1 is compared where the task is TREC DL 2020 documents (``--dataset`` for files). With several
processes, global rank zero merges, retrieves and writes; bad input ends in one line, exit status 2.
"""

from __future__ import annotations

import argparse

from common.commands.task_options import (add_precision_arguments, add_process_arguments, add_task_arguments,
                                          add_workers_argument, fresh_output_dir, resolve_depth, resolve_precision,
                                          runs_on_cuda, task_spec_from_args, trainer_options)
from common.commands.provenance import write_provenance
from common.commands.run_folder import launched_as_global_zero
from common.commands.store_options import command_parser
from common.data.irds_files import refuse_missing_files
from common.refusals import checkpoint_file, input_errors, positive_int, usage_error
from conformer_kernel.index import existing_index, orcas_task, read_trained
from conformer_kernel.orcas import ORCAS_PARTS
from conformer_kernel.train import DATASET, DEPTH, MEASURE_LABELS, MODES, PAPER, paper_tables

#: Candidates re-ranked per query by a checkpoint without a depth setting: Table 1's rerank subtask, BM25's top 100.
DEFAULT_DEPTH = 100


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser("python -m conformer_kernel.evaluate", __doc__)
    add = parser.add_argument
    add("--checkpoint", required=True, type=checkpoint_file, help="a conformer_kernel.train checkpoint")
    add_task_arguments(parser, "builtin:<split> or irds:<ir_datasets id>")
    add("--modes", nargs="+", choices=MODES, default=list(MODES), help="default: both")
    add("--index", type=existing_index,
        help="an existing conformer_kernel.index folder for fullrank (default: build one)")
    add("--orcas", type=orcas_task, default=None, help="ORCAS field (default: the checkpoint's training setting)")
    add("--output_dir", help="default: a new outputs/ck-evaluate-<time>")
    add("--depth", type=positive_int, default=None,
        help="candidates re-ranked per query (default: the checkpoint's data.depth, else 100)")
    add("--dataset", default=None, choices=[DATASET], help="the paper's dataset the task is, to compare with Table 1 "
        "(default: an irds: task's own, if it is TREC DL 2020 documents; files and builtin: none)")
    add("--test_queries", type=positive_int, default=None,
        help="evaluate a sample of this many queries (seed 0, as data.test_queries; default all)")
    add("--batch_size", type=positive_int, default=64, help="pairs per re-ranking batch (default 64)")
    add("--relevance_level", type=int, default=1, help="lowest relevant label (default 1)")
    add_process_arguments(parser)
    add_precision_arguments(parser)
    add_workers_argument(parser, "read and featurise the documents")
    return parser


def main(argv=None) -> dict | None:
    """Evaluate as the command line says: the metrics on global rank zero (None without qrels), else None."""
    args = build_parser().parse_args(argv)
    if args.index and "fullrank" not in args.modes:
        usage_error("--index: only fullrank reads an index; add it to --modes, or leave --index out")
    out = fresh_output_dir(args.output_dir, "ck-evaluate")
    task = task_spec_from_args(args)
    orcas = [args.orcas] if args.orcas else []  # the checkpoint's own field is checked once it is read
    refuse_missing_files([task, *orcas], ["--task", *["--orcas"] * len(orcas)], [None, *[ORCAS_PARTS] * len(orcas)],
                         quiet=not launched_as_global_zero())
    from common.commands.quiet import quiet_lightning
    from common.training.processes import leave_process_group_at_exit

    quiet_lightning()
    leave_process_group_at_exit()

    import lightning as L

    from common.commands.cli import INPUT_ERRORS
    from common.commands.outputs import NO_QRELS, metrics_table, mode_run, write_mode_results
    from common.data.rerank import reranked_run
    from common.report import paper_dataset
    from conformer_kernel.data import ConformerKernelDataModule
    from conformer_kernel.impact_index import (ImpactIndex, MissingTermsError, evaluated_topics, full_ranking,
                                               load_for_inference)

    state = read_trained(args.checkpoint)
    data_settings = state.get("datamodule_hyper_parameters", {})
    depth, depth_source = resolve_depth(args.depth, data_settings, DEFAULT_DEPTH)
    precision = resolve_precision(args, args.checkpoint, state, runs_on_cuda(args.accelerator))
    data = ConformerKernelDataModule(train=None, dev=None, test=task, depth=depth, test_queries=args.test_queries,
                                     eval_batch_size=args.batch_size, num_workers=args.num_workers,
                                     relevance_level=args.relevance_level)
    with input_errors(*INPUT_ERRORS):  # the task's files and the ORCAS field's, before anything is built or written
        data.check_tasks()
        model, featurizer = load_for_inference(args.checkpoint, args.orcas, data_settings)
    data.use_featurizer(featurizer)
    index = None
    if args.index:  # read, and checked to hold every evaluated query's terms, before anything is written
        index = ImpactIndex.load(args.index)
        with input_errors(MissingTermsError):
            index.check_terms(featurizer.query_terms(text) for text in evaluated_topics(data).values())
    if launched_as_global_zero():
        if "rerank" in args.modes:
            print(f"re-ranking the top {depth} candidates per query ({depth_source})")
        print(precision)
        out.mkdir(parents=True, exist_ok=True)
        write_provenance(out, "conformer_kernel.evaluate", argv)
    runs = {}
    if "rerank" in args.modes:
        trainer = L.Trainer(**trainer_options(args), logger=False, default_root_dir=out, enable_model_summary=False)
        trainer.test(model, datamodule=data)
        runs["rerank"] = reranked_run(data.test_pairs(), model.test_scores, data.source("test").candidates())
    if "fullrank" in args.modes:  # its index built by every process, its retrieval on global rank zero (else None)
        runs["fullrank"] = full_ranking(model, featurizer, data, out / "index", trainer_options(args), index,
                                        num_workers=args.num_workers)
    if not launched_as_global_zero():  # rank zero holds every score and writes the files
        return None
    dataset = args.dataset or paper_dataset(PAPER, task)
    test = data.source("test")
    metrics = write_mode_results(out, model.hparams.model, runs, test.qrels(), test.candidates(), args.relevance_level,
                                 measures=model.measures, task=task, dataset=dataset, depth=DEPTH)
    title = f"{test.name}: {len(data.eval_queries('test'))} queries"
    written = ", ".join(str(out / mode_run(m)) for m in runs)
    if metrics is None:
        print(f"{title}\n\n{NO_QRELS}\n\nwritten: {written}, {out / 'task.json'}")
        return None
    print(f"{metrics_table(metrics, title, model.measures, MEASURE_LABELS)}\n")
    print(paper_tables(metrics, task, dataset, data))
    print(f"\nwritten: {written}, {out / 'metrics.json'}, {out / 'task.json'}")
    return metrics


if __name__ == "__main__":
    main()
