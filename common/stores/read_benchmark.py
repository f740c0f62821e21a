"""``python -m common.stores.read_benchmark STORE [STORE ...]``: milliseconds to read a query's candidates from
finished representation stores as the scorers read them, cold and warm, so that stores of one collection in different
dtypes (fp32, fp16, int8) compare on what a query pays to read them.

A query's ``--candidates`` are distinct documents of the store drawn uniformly at random, a new draw each repeat, as
a first stage's top N scatters over a store's order (`common.benchmarks.store_reads.draw_candidates`, seeded by
``--seed``), read in batches of ``--batch_size`` through `RepresentationStore.padded` (float32 rows zero-padded, int8
rows dequantised: what `common.stores.scoring.StoreScorer` hands its model). Cold: each query by a fresh reader whose
shards a spare draw has mapped (as a server that has run a while has them), the store's files then dropped from the
page cache (`evict_from_page_cache`), so that every query's rows come from the disk; evicting once before all the
queries, as the speed benchmarks do over their large stores, would leave a small store's later queries reading pages
that the kernel's read-ahead brought in for the earlier ones. Warm: the same draws by one reader, a second pass after
an untimed first. One row per store: its dtype, width, documents, rows and bytes per document, the median query's
cold and warm read milliseconds, the shards a draw falls in and the largest share of the store still cached when a
cold query started (``mincore``: near 0 where the eviction worked). The committed run, ``results/mva``'s
``store_reads.csv``, reads MVA²'s and MVA³'s fp32 and int8 stores of TREC DL 2019's candidates (results/mva/README.md).
"""

from __future__ import annotations

import statistics
import sys
import time

from common.benchmarks.machine import describe_machine, machine
from common.benchmarks.options import benchmark_parser, parse
from common.benchmarks.session import Session, output_paths
from common.benchmarks.store_reads import cached_fraction, draw_candidates, evict_from_page_cache, median_query
from common.refusals import positive_int, usage_error
from common.stores.verify import store_folder

TABLE = (("dtype", ""), ("width", "d"), ("documents", ","), ("rows_per_document", ".1f"),
         ("bytes_per_document", ",.0f"), ("candidates", "d"), ("read_ms", ".2f"), ("warm_read_ms", ".2f"),
         ("candidate_shards", ".0f"), ("store_cached", ".2f"), ("load_1min", ".1f"))


def measure(folder, args) -> dict:
    """The row of the store in `folder`: the median query's cold and warm reads of ``--candidates`` candidates."""
    import numpy as np

    from common.stores.representations import RepresentationStore

    store = RepresentationStore.open(folder)
    if len(store) < args.candidates:
        usage_error(f"argument --candidates: {folder} holds {len(store):,} documents, fewer than the {args.candidates} "
                    "a query draws")
    doc_ids = store.doc_ids  # in the plan's order: a draw's positions name them
    draws = [draw_candidates(len(store), args.candidates, args.seed, repeat) for repeat in range(args.repeats + 1)]
    *timed, spare = [[doc_ids[p] for p in positions.tolist()] for positions in draws]
    files = sorted(path for path in store.folder.iterdir() if path.is_file())  # its shards, id table and manifest

    def query(reader, ids: list[str]) -> dict:
        start = time.perf_counter()
        for first in range(0, len(ids), args.batch_size):
            reader.padded(ids[first : first + args.batch_size])
        return {"ms": (time.perf_counter() - start) * 1000}

    cold, cached = [], []
    for ids in timed:
        store = RepresentationStore.open(folder)  # a fresh reader, the last one's maps let go
        store.get_many(spare, read_ahead=False)  # its shards mapped, no row read
        evict_from_page_cache(files)
        cached.append(cached_fraction(files))
        cold.append(query(store, ids))
    for ids in timed:
        query(store, ids)
    warm = [query(store, ids) for ids in timed]
    shards = [len(np.unique(positions // store.manifest["shard_size"])) for positions in draws[:-1]]
    return {"bench": "store_reads", "store": str(folder), "dtype": store.dtype, "width": store.width,
            "documents": len(store), "rows_per_document": store.manifest["rows"] / len(store),
            "bytes_per_document": store.bytes_per_document, "candidates": args.candidates,
            "batch_size": args.batch_size, "read_ms": median_query(cold)["ms"],
            "warm_read_ms": median_query(warm)["ms"], "candidate_shards": statistics.median(shards),
            "store_cached": None if None in cached else max(cached), "shard_size": store.manifest["shard_size"],
            "repeats": args.repeats, **machine()}


def parse_args(argv: list[str] | None):
    parser = benchmark_parser(
        "python -m common.stores.read_benchmark", __doc__.split("\n\n")[0], results="mva",
        writes="store_reads.csv and store_reads.jsonl", repeats=20,
        repeats_help="timed queries per store, each its own draw (the median is reported)", devices=False,
        seed="seeds the candidates' draws")
    add = parser.add_argument
    add("stores", nargs="+", type=store_folder, metavar="STORE", help="a finished store's folder")
    add("--candidates", type=positive_int, default=100, help="candidates a query reads")
    add("--batch_size", type=positive_int, default=128, help="candidates per read (the evaluate commands' default "
        "--batch_size)")
    return parse(parser, argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with Session(args, output_paths(args.output_dir, "store_reads", ("csv", "jsonl"))) as session:
        session.say(f"store reads: {args.candidates} candidates a query, {args.repeats} queries a store, cold then "
                    f"warm; {describe_machine()}")
        rows = [session.emit(measure(folder, args), f"{folder}: done") for folder in args.stores]
        return session.finish(rows, table=TABLE)


if __name__ == "__main__":
    sys.exit(main())
