"""``python -m common.commands.loader_benchmark``: examples a second of each package's training and index loaders on
the CPU with 0, 2 and 4 workers (``results/loaders/``), to read against a model's step: the loaders as the commands
build them, on the built-in collection, each timed ``--repeats`` times on a new loader. The paper packages' classes
are named by import path (`common` imports no paper package). Details: docs/loader_benchmark.md.
"""

from __future__ import annotations

import itertools
import os
import statistics
import sys
import time
from collections.abc import Callable
from importlib import import_module
from pathlib import Path
from pkgutil import resolve_name

from common.benchmarks.fresh_process import guarded
from common.benchmarks.machine import cpu_model, machine
from common.benchmarks.memory import peak_rss_mb, reset_peak_rss, rss_mb
from common.benchmarks.options import benchmark_parser, parse
from common.benchmarks.plots import Line, Panel, draw
from common.benchmarks.session import Session, output_paths, significant
from common.benchmarks.timing import spread_ms
from common.refusals import nonnegative_int, positive_int

#: Each loader: (package data module by import path, its embedded default's data settings, the pass it feeds).
TRAINING = {
    "qds.train": ("qds.data.QDSDataModule", {"pattern": "qds", "tokenizer": "builtin", "max_length": 2048,
                                             "negatives": 1, "depth": 30, "batch_size": 8}),
    "conformer_kernel.train": ("conformer_kernel.data.ConformerKernelDataModule", {
        "embedding_dim": 32, "min_count": 2, "depth": 100, "group_size": 4, "batch_size": 16}),
    "earl.train": ("earl.data.EARLDataModule", {"architecture": "earl", "tokenizer": "builtin", "query_length": 16,
                                                "passage_length": 128, "negatives": 1, "depth": 30, "batch_size": 16}),
    "mva.train": ("mva.data.MVADataModule", {"architecture": "mva", "tokenizer": "builtin", "query_length": 32,
                                             "passage_length": 112, "negatives": 7, "depth": 30, "batch_size": 16}),
}
#: Each index loader: the training loader whose data module encodes its documents, and its command's batch size.
INDEX = {"conformer_kernel.index": ("conformer_kernel.train", 8), "earl.index": ("earl.train", 128),
         "mva.index": ("mva.train", 128)}
LOADERS = (*TRAINING, *INDEX)
WORKERS = (0, 2, 4)
#: The tokens (terms) a document is cut to: each loader's ``n``.
LENGTHS = {"qds.train": "max_length", "earl.train": "passage_length", "mva.train": "passage_length"}
CK_DOC_TERMS = 4000  # conformer_kernel.data's max_doc_terms, the paper's
FIELDS = ["bench", "impl", "n", "pass", "workers", "batch_size", "ms", "ms_min", "ms_max", "examples_per_s",
          "startup_s", "peak_mb", "batches", "examples", "cpus", "threads", "cpu", "load_1min", "skipped"]
TABLE = (("impl", ""), ("workers", "d"), ("batch_size", "d"), ("ms", ".1f"), ("examples_per_s", ".1f"),
         ("startup_s", ".2f"), ("peak_mb", ".1f"), ("skipped", ""))


def data_module(loader: str, workers: int):
    """The training `loader`'s data module on the built-in tasks with `workers` workers, its training set up."""
    path, settings = TRAINING[loader]
    data = resolve_name(path)(train="builtin:train", dev=None, test="builtin:test", num_workers=workers, **settings)
    data.prepare_data()
    data.setup("fit")
    return data


def make_loader(loader: str, workers: int, shard_size: int) -> tuple[object, Callable[[object], int]]:
    """`loader`'s loader with `workers` workers and how many examples a batch of it holds."""
    if loader in TRAINING:
        return data_module(loader, workers).train_dataloader(), lambda batch: batch["labels"].numel()
    from torch.utils.data import DataLoader

    from common.stores.writer import loader_options

    training, batch_size = INDEX[loader]
    data = data_module(training, 0)
    documents = data.source("test").documents()
    doc_ids = list(documents)
    shards = list(range(-(-len(doc_ids) // shard_size)))
    if loader == "conformer_kernel.index":
        impact_index = import_module("conformer_kernel.impact_index")
        featurizer = data.featurizer
        terms = impact_index.index_terms([data.source("test").topics()], featurizer)
        dataset = impact_index.DocumentShards(doc_ids, documents, featurizer, terms, shard_size, batch_size, shards)
        count = lambda batch: batch[1]  # noqa: E731  (shard, documents, batches)
    else:
        from common.stores.writer import EncodedShards

        dataset = EncodedShards(shards, lambda s: doc_ids[s * shard_size : (s + 1) * shard_size], documents,
                                data.encoder, batch_size)
        count = lambda batch: sum(len(positions) for positions, _, _ in batch[1])  # noqa: E731  (shard, batches)
    return DataLoader(dataset, batch_size=1, collate_fn=dataset.collate, **loader_options(None, workers)), count


def length(loader: str) -> int:
    """The tokens (terms) `loader` cuts a document to: its row's ``n``."""
    training = INDEX[loader][0] if loader in INDEX else loader
    return CK_DOC_TERMS if training == "conformer_kernel.train" else TRAINING[training][1][LENGTHS[training]]


def batch_size(loader: str) -> int:
    """`loader`'s batch: groups for a training loader, documents per forward pass for an index one."""
    return INDEX[loader][1] if loader in INDEX else TRAINING[loader][1]["batch_size"]


def measure(loader: str, workers: int, batches: int, repeats: int, shard_size: int) -> dict:
    """`loader` with `workers` workers, `repeats` times on a new loader."""
    startups, rates, per_step, peak, examples = [], [], [], None, None
    for repeat in range(repeats):
        made, count = make_loader(loader, workers, shard_size)
        if repeat == 0:
            reset_peak_rss()
            before = rss_mb()
        start = time.perf_counter()
        iterator = iter(made)
        next(iterator)
        first = time.perf_counter()
        seen, counted = 0, 0
        for batch in itertools.islice(iterator, batches):
            seen, counted = seen + 1, counted + count(batch)
        end = time.perf_counter()
        del iterator, made  # its workers end
        if repeat == 0:
            peak = max(peak_rss_mb() - before, 0.0)
        if not seen:
            return {"skipped": f"{loader} gave a single batch: nothing to time after the first"}
        startups.append(first - start)
        rates.append(counted / (end - first))
        steps = counted / batch_size(loader) if loader in INDEX else seen  # what the model's steps consumed
        per_step.append(1000 * (end - first) / steps)
        examples = counted
    return {**spread_ms(per_step), "examples_per_s": statistics.median(rates),
            "startup_s": statistics.median(startups), "peak_mb": peak, "batches": seen, "examples": examples}


def plot(rows: list[dict], path: Path, overwrite: bool) -> None:
    """Examples a second of each loader, one bar per worker count, training and index loaders apart."""
    measured = [r for r in rows if r["ms"] is not None]
    panels = [Panel(title, "", "examples per second", log="", bars=True, lines=[
        Line(f"{workers} workers", [(r["impl"], r["examples_per_s"], f"{r['examples_per_s']:.0f}")
                                    for r in measured if (r["pass"], r["workers"]) == (pass_, workers)])
        for workers in sorted({r["workers"] for r in measured})])
        for pass_, title in (("train", "training loaders (query-document pairs)"),
                             ("infer", "index loaders (documents)")) if any(r["pass"] == pass_ for r in measured)]
    first = measured[0]
    draw(panels, path, size=(6.0, 4.5), overwrite=overwrite,
         title=f"loaders on {first['cpu']} ({first['cpus']} logical CPUs), main process {first['threads']} threads")


def parse_args(argv: list[str] | None):
    parser = benchmark_parser(
        "python -m common.commands.loader_benchmark", "Examples per second of each package's training and index "
        "loaders on the CPU at 0, 2 and 4 loader workers.", results="loaders", writes="loaders.csv, .jsonl and .png",
        repeats=3, repeats_help="new loaders timed per setting (the median is reported)", devices=False)
    add = parser.add_argument
    add("--loaders", nargs="+", default=list(LOADERS), choices=LOADERS, metavar="LOADER",
        help=f"loaders to time, of {', '.join(LOADERS)}")
    add("--workers", type=nonnegative_int, nargs="+", default=list(WORKERS), metavar="N",
        help="loader worker processes (0: the main process)")
    add("--batches", type=positive_int, default=20, help="batches timed after the first")
    add("--shard_size", type=positive_int, default=250, help="documents per shard of the index loaders")
    return parse(parser, argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with Session(args, output_paths(args.output_dir, "loaders")) as session:
        here = machine()
        session.say(f"{cpu_model()}, {os.cpu_count()} logical CPUs; main process {here['threads']} threads, load "
                    f"{here['load_1min']:.2f}; {args.batches} batches after the first, {args.repeats} repeats")
        rows = []
        for loader, workers in itertools.product(sorted(args.loaders, key=LOADERS.index), args.workers):
            result = guarded(measure, loader, workers, args.batches, args.repeats, args.shard_size)
            row = {"bench": "loaders", "impl": loader, "n": length(loader),
                   "pass": "infer" if loader in INDEX else "train", "workers": workers,
                   "batch_size": batch_size(loader), "skipped": result.get("skipped"), "cpus": os.cpu_count(),
                   **{key: None for key in ("ms", "ms_min", "ms_max", "examples_per_s", "startup_s", "peak_mb")},
                   **{key: significant(value) if isinstance(value, float) else value
                      for key, value in result.items() if key != "skipped"}, **machine()}
            progress = (f"skipped: {row['skipped']}" if row["ms"] is None else
                        f"{row['examples_per_s']:.1f} examples/s, {row['ms']:.1f} ms a batch")
            rows.append(session.emit(row, f"{loader:>22} {workers} workers: {progress}"))
        return session.finish(rows, FIELDS, plot=plot, table=TABLE)


if __name__ == "__main__":
    sys.exit(main())
