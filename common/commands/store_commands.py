"""The two commands of a package whose documents are stored ahead of time: ``<package>.index`` builds a representation
store with a trained model (`build_index`, after `check_room`), ``<package>.evaluate`` re-ranks a task from it
(`StoreEvaluation`: one query at a time in global rank zero, the paper's online setting, under ``--precision``'s
autocast; ``--compare_end_to_end`` adds exactness.json).
"""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Callable

from common.commands.provenance import write_provenance
from common.commands.store_options import DTYPES, check_candidates, open_store, read_collection
from common.commands.task_options import (autocast, check_one_device, fresh_output_dir, one_device, resolve_depth,
                                          resolve_precision, runs_on_cuda, task_spec_from_args, trainer_options)
from common.commands.run_folder import launched_as_global_zero
from common.data.irds_files import refuse_missing_files
from common.refusals import input_errors, usage_error

#: The data settings of a checkpoint that an evaluate command's data module takes as they were in training.
DATA_SETTINGS = ("tokenizer", "tokenizer_task", "query_length", "passage_length", "relevance_level")


def build_index(args: argparse.Namespace, state: dict, store, what: str, **options):
    """Build the store of an index command from its `args`, checkpoint `state` and package `store` module."""
    from common.commands.quiet import quiet_lightning
    from common.training.processes import leave_process_group_at_exit

    quiet_lightning()
    leave_process_group_at_exit()

    from common.stores.representations import StoreMismatchError, checkpoint_hash
    from common.stores.writer import build_representations

    precision = resolve_precision(args, args.checkpoint, state, runs_on_cuda(args.accelerator))
    encoder = store.data_encoder(state.get("datamodule_hyper_parameters", {}))
    documents, doc_ids = read_collection(args)
    checkpoint_sha256 = checkpoint_hash(args.checkpoint)
    ranker = store.load_ranker(state)
    representation = store.representation(ranker, encoder, **options)
    room = check_room(args, representation, encoder, documents, doc_ids) if launched_as_global_zero() else None
    print(f"{'resuming' if args.resume else 'building'} {what} of {ranker.name} ({args.dtype}) over "
          f"{len(doc_ids):,} documents of {args.collection} in {args.output_dir}")
    if room:
        print(room)
    print(precision)
    try:
        built = build_representations(
            representation, encoder, documents, doc_ids, args.output_dir,
            checkpoint_sha256=checkpoint_sha256, dtype=DTYPES[args.dtype], shard_size=args.shard_size,
            batch_size=args.batch_size, resume=args.resume, verify=args.verify,
            trainer_options=trainer_options(args), num_workers=args.num_workers,
        )
    except StoreMismatchError as error:
        usage_error(f"--output_dir: {error}")
    if built is not None:
        print(store.storage_report(built))
        print(f"written: {args.output_dir}")
    return built


def check_room(args: argparse.Namespace, representation, encoder, documents, doc_ids: list[str]) -> str:
    from common.stores.size import estimate_store, format_bytes, free_space, written_bytes

    estimate = estimate_store(representation, encoder, documents, doc_ids, dtype=DTYPES[args.dtype],
                              shard_size=args.shard_size, batch_size=args.batch_size)
    written = written_bytes(args.output_dir) if args.resume else 0
    folder, free = free_space(args.output_dir)
    more = (f" more ({format_bytes(estimate.bytes)} in all, {format_bytes(written)} written)" if written else "")
    if free < estimate.bytes - written:
        usage_error(f"--output_dir: no room for the store in {args.output_dir}: it needs an estimated "
                    f"{format_bytes(estimate.bytes - written)}{more} and {folder} has {format_bytes(free)} free")
    left = f", {format_bytes(written)} of it written" if written else ""
    return f"estimated size: {estimate.describe()}{left}; free on {folder}: {format_bytes(free)}"


def queries_progress(label: str):
    from common.commands.progress import tracked

    return functools.partial(tracked, what="query", desc=label)


class StoreEvaluation:
    """An evaluate command over parsed `args`: the `package` names its index command, output folder and paper; the
    `strategies` a first pass's store may hold; the `default_depth` of a checkpoint without a depth setting; the
    comparison with the paper, ``paper_tables(metrics, task, dataset) -> str`` (a staticmethod)."""

    package: str
    strategies: tuple[str, ...]
    default_depth: int
    paper_tables: Callable[..., str]

    def __init__(self, args: argparse.Namespace, argv: list[str] | None = None):
        self.args, self.argv = args, argv
        self.index_command = f"{self.package}.index"

    def check_args(self) -> None:
        """What the option types do not check, before anything is imported."""
        check_one_device(self.args, f"{self.package}.evaluate", "one query at a time, the paper's online setting")
        if self.args.compare_end_to_end and self.args.store is None:
            usage_error("--compare_end_to_end: compares a store's scores with end-to-end ones; give --store")

    def open_store(self):
        """The ``--store`` (built from this very checkpoint file, of one of `strategies`), or None."""
        if self.args.store is None:
            return None
        return open_store(self.args.store, self.args.checkpoint, self.index_command, self.strategies)

    def main(self) -> dict | None:
        args = self.args
        self.check_args()
        if not launched_as_global_zero():
            return None
        self.out = out = fresh_output_dir(args.output_dir, f"{self.package}-evaluate")
        self.task = task = task_spec_from_args(args)
        refuse_missing_files([task], ["--task"])
        from common.commands.quiet import quiet_lightning
        from common.training.processes import leave_process_group_at_exit

        quiet_lightning()
        leave_process_group_at_exit()

        state, store = self.read_inputs()

        from common.commands.outputs import NO_QRELS, metrics_table, write_results
        from common.data.rerank import reranked_run
        from common.report import paper_dataset
        from common.stores.scoring import exactness_line, score_pairs

        self.device = one_device(args)
        precision = resolve_precision(args, args.checkpoint, state, self.device.type == "cuda")
        data, pairs, depth_source = self.open_task(state, store)
        self.ranker = ranker = self.load_ranker(state).to(self.device)
        source = data.source("test")
        self.documents, self.topics = source.documents(), source.topics()
        try:
            self.scorer = scorer = self.make_scorer(store)
        except ValueError as error:
            usage_error(f"--store: {error}")
        self.queries = len({qid for qid, _ in pairs})
        print(f"re-ranking the top {self.depth} candidates per query ({depth_source}): {len(pairs):,} pairs of "
              f"{self.queries:,} queries, {self.describe()}; {precision}")
        out.mkdir(parents=True, exist_ok=True)
        write_provenance(out, f"{self.package}.evaluate", self.argv)
        candidates, self.qrels, self.level = source.candidates(), source.qrels(), data.tasks.relevance_level
        with autocast(args.precision, self.device.type):
            scores = score_pairs(scorer, pairs, self.topics, progress=queries_progress(scorer.label))
            self.print_seconds(scorer)
            self.run = run = reranked_run(pairs, scores, candidates)
            self.others = {}
            report = self.compare_end_to_end(store, pairs, scores, candidates) if args.compare_end_to_end else None
            written = self.further_runs()
        dataset = args.dataset or paper_dataset(self.package, task)
        metrics = write_results(out, ranker.name, run, self.qrels, candidates, self.level, measures=ranker.measures,
                                task=task, dataset=dataset, others=self.others)
        title = f"{source.name}: {len(run)} queries, top {self.depth} re-ranked, {scorer.label}"
        print()
        if metrics is None:
            print(f"{title}\n\n{NO_QRELS}")
        else:
            print(metrics_table(metrics, title, ranker.measures))
            for table in [*self.tables(metrics), self.paper_tables(metrics, task, dataset)]:
                print(f"\n{table}")
        if report is not None:
            print(f"\n{exactness_line(scorer.label, report)}")
        files = [out / "run.trec", *written, *([] if metrics is None else [out / "metrics.json"]), out / "task.json",
                 *([] if report is None else [out / "exactness.json"])]
        print(f"\nwritten: {', '.join(map(str, files))}")
        return metrics

    def open_task(self, state: dict, store) -> tuple:
        """The data module of ``--task``, its (qid, docid) pairs, each with rows in `store`, and the depth's origin."""
        from common.commands.cli import INPUT_ERRORS

        args = self.args
        self.data_settings = state.get("datamodule_hyper_parameters", {})
        settings = {k: v for k, v in self.data_settings.items() if k in DATA_SETTINGS}
        if args.relevance_level is not None:
            settings["relevance_level"] = args.relevance_level
        self.depth, depth_source = resolve_depth(args.depth, self.data_settings, self.default_depth)
        architecture = state["hyper_parameters"]["architecture"]
        data = self.data_module(train=None, dev=None, test=self.task, architecture=architecture, depth=self.depth,
                                test_queries=args.test_queries, **settings)
        with input_errors(*INPUT_ERRORS):
            data.check_tasks()
        pairs = data.eval_pairs("test")
        if store is not None:
            check_candidates(store, pairs, self.index_command)
        return data, pairs, depth_source

    def compare_end_to_end(self, store, pairs: list, scores, candidates: dict) -> dict:
        from common.data.rerank import reranked_run
        from common.io import atomic_write
        from common.metrics import evaluate_run
        from common.stores.scoring import compare_scores, score_pairs

        name, measures, level = self.ranker.name, self.ranker.measures, self.level
        reference_scorer = self.make_scorer(None)
        reference = score_pairs(reference_scorer, pairs, self.topics, progress=queries_progress(reference_scorer.label))
        self.print_seconds(reference_scorer, end_to_end=True)
        metrics = reference_metrics = None
        if self.qrels:
            reference_run = reranked_run(pairs, reference, candidates)
            reference_metrics = evaluate_run(self.qrels, reference_run, measures, relevance_level=level)
            self.others[f"{name}_end_to_end"] = reference_metrics
            metrics = evaluate_run(self.qrels, self.run, measures, relevance_level=level)
        report = compare_scores(scores, reference, pairs, metrics, reference_metrics)
        report = {"store": str(self.args.store), **self.exactness_identity(store), "dtype": store.dtype,
                  "bytes_per_document": store.bytes_per_document, "store_seconds": self.scorer.seconds,
                  "end_to_end_seconds": reference_scorer.seconds, **report}
        with atomic_write(self.out / "exactness.json") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
        return report

    def further_runs(self) -> list:
        """Runs beyond the first pass and what else the paper's command writes, before metrics.json."""
        return []

    def tables(self, metrics: dict) -> list[str]:
        return []
