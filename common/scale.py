"""``python -m common.scale``: what the training table and the representation stores cost as the data grows toward MS
MARCO's size, measured on synthetic inputs of its shape and extrapolated.

``training`` and ``store`` each measured in a fresh process; each measure fitted linearly in the size (`polyfit`) and
evaluated at MS MARCO's sizes (``extrapolation.json``), with the stores at the papers' widths in fp32, fp16 and int8
rows (`common.stores.rows`). Memory in MiB. docs/scale.md has the details.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from common.benchmarks.fits import fit_value, polyfit
from common.benchmarks.fresh_process import answer, measure_in_child
from common.benchmarks.machine import describe_machine, machine
from common.benchmarks.memory import status_mb
from common.benchmarks.options import benchmark_parser, parse
from common.benchmarks.plots import Line, Panel, draw
from common.benchmarks.session import Session, output_paths, significant
from common.benchmarks.store_reads import evict_from_page_cache
from common.refusals import existing_file, positive_int

MODULE = "common.scale"
#: msmarco-passage: passages; train/judged: candidates, judged queries; train: queries (topics)
PASSAGES, CANDIDATES, TRAIN_QUERIES, TRAIN_TOPICS = 8_841_823, 478_002_393, 502_939, 808_731
SHARD_SIZE = 1000
#: Stores at the papers' widths (columns per row, rows per passage): EARL S1's D, S2's 2K keys and values (Eq. 25),
#: MVA¹'s 70 and MVA²'s 8 timesteps of [D_K | D_V], DE's one vector.
PAPER_STORES = {"earl_s1": (768, 76), "earl_s2": (4 * 768, 76), "mva1": (256, 70), "mva2": (256, 8), "de": (768, 1)}
#: The row types a store at the papers' widths is also sized in, beside fp32 (`common.stores.rows`).
SMALLER_DTYPES = ("float16", "int8")
#: Private memory above which 8 processes (one per GPU) would not fit 1 TB beside the page cache's share.
NODE_MEMORY, PROCESSES = 1e12, 8


def write_training_files(folder: Path, candidates: int, per_query: int, seed: int) -> dict:
    """A synthetic training task of `candidates` lines in `folder`: TREC run, qrels and topics; their paths."""
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    paths = {name: str(folder / name) for name in ("run.txt", "qrels.txt", "queries.tsv")}
    rng = np.random.default_rng(seed)
    queries = -(-candidates // per_query)
    with open(paths["run.txt"], "w") as run, open(paths["qrels.txt"], "w") as qrels, \
            open(paths["queries.tsv"], "w") as topics:
        for q in range(queries):
            count = min(per_query, candidates - q * per_query)
            docs = rng.choice(PASSAGES, size=count, replace=False)
            scores = np.sort(rng.gamma(4.0, 3.0, size=count))[::-1]
            ranked = enumerate(zip(docs.tolist(), scores.tolist()), 1)
            run.write("".join(f"q{q} Q0 {d} {r} {s:.4f} bm25\n" for r, (d, s) in ranked))
            qrels.write(f"q{q} 0 {docs[rng.integers(count)]} 1\n")
            topics.write(f"q{q}\tsynthetic query {q}\n")
    return paths


def register_training_task(paths: dict) -> str:
    """Register the synthetic task's files as an ir_datasets dataset; its id."""
    import ir_datasets
    from ir_datasets.datasets.base import Dataset
    from ir_datasets.formats import TrecQrels, TrecScoredDocs, TsvQueries
    from ir_datasets.util import LocalDownload

    dataset_id = f"efficient-rankers-scale/{Path(paths['run.txt']).parent.name}"
    if dataset_id not in ir_datasets.registry:
        ir_datasets.registry.register(dataset_id, Dataset(
            TsvQueries(LocalDownload(Path(paths["queries.tsv"]))),
            TrecQrels(LocalDownload(Path(paths["qrels.txt"])), {0: "not", 1: "relevant"}),
            TrecScoredDocs(LocalDownload(Path(paths["run.txt"])))))
    return dataset_id


def synthetic_matrices(start: int, count: int, width: int, rows: int, seed: int, dtype: str):
    """Documents `start`.. `start` + `count`'s rows: (r, width) of `dtype`, r uniform in 1..2·rows-1 (seeded by id)."""
    import numpy as np

    rngs = (np.random.default_rng((seed, i)) for i in range(start, start + count))
    return [rng.standard_normal((int(rng.integers(1, 2 * rows)), width), dtype=np.float32).astype(dtype)
            for rng in rngs]


def measure_training_build(paths: dict, cache: str) -> dict:
    os.environ["EFFICIENT_RANKERS_CACHE"] = cache
    from common.data.irds import IrDatasetsSource
    from common.data.training_table import ARRAYS
    from common.stores.size import written_bytes

    source = IrDatasetsSource(register_training_task(paths))
    start = time.perf_counter()
    table = source.training_table()
    seconds = time.perf_counter() - start
    folder = next(p for p in (Path(cache) / "training").iterdir() if p.is_dir())
    columns = [name for name in ARRAYS if name not in ("queries", "docs")]  # the rest: the ids and table.json
    return {"build_s": seconds, "peak_mb": status_mb("VmHWM:"), "bytes": written_bytes(folder),
            "column_bytes": sum((folder / f"{name}.npy").stat().st_size for name in columns),
            "queries": len(table), "documents": len(table.docs),
            "query_id_bytes": table.queries.dtype.itemsize, "doc_id_bytes": table.docs.dtype.itemsize}


def measure_training_process(paths: dict, cache: str, dicts: bool, draws: int) -> dict:
    """One training process: the sampler over the mapped table (or, with `dicts`, over the task read as dicts)."""
    os.environ["EFFICIENT_RANKERS_CACHE"] = cache
    import numpy as np

    from common.data.irds import IrDatasetsSource
    from common.data.samplers import PointwiseSampler

    source = IrDatasetsSource(register_training_task(paths))
    before = status_mb("RssAnon:")
    start = time.perf_counter()
    sampler = (PointwiseSampler.of(source.qrels(), source.candidates(), negatives=1) if dicts
               else PointwiseSampler(source.training_table(), negatives=1))
    ready_s = time.perf_counter() - start
    held = status_mb("RssAnon:") - before
    indices = np.random.default_rng(0).choice(len(sampler), size=min(draws, len(sampler)), replace=False)
    start = time.perf_counter()
    for i in indices.tolist():
        sampler[i]
    draw_us = (time.perf_counter() - start) / len(indices) * 1e6
    after_draws = status_mb("RssAnon:") - before
    topics = source.topics()  # every training process holds the queries' text too
    return {"ready_s": ready_s, "private_mb": held, "private_after_draws_mb": after_draws, "draw_us": draw_us,
            "anchors": len(sampler), "topics_mb": status_mb("RssAnon:") - before - after_draws,
            "topics": len(topics)}


def measure_store_build(folder: str, documents: int, width: int, rows: int, seed: int, dtype: str) -> dict:
    from common.stores.representations import StoreWriter
    from common.stores.size import written_bytes

    ids = [str(i) for i in range(documents)]
    start = time.perf_counter()
    writer = StoreWriter(folder, doc_ids=ids, width=width, dtype=dtype, shard_size=SHARD_SIZE,
                         identity={"checkpoint": "synthetic", "strategy": "scale"})
    compute_s = 0.0
    for shard in range(writer.num_shards):
        made = time.perf_counter()
        arrays = synthetic_matrices(shard * SHARD_SIZE, len(writer.shard_doc_ids(shard)), width, rows, seed, dtype)
        compute_s += time.perf_counter() - made
        writer.write_shard(shard, arrays)
    store = writer.finish()
    seconds = time.perf_counter() - start - compute_s
    return {"build_s": seconds, "peak_mb": status_mb("VmHWM:"), "bytes": written_bytes(Path(folder)),
            "rows": store.manifest["rows"], "row_bytes": store.manifest["bytes"]}


def measure_store_reads(folder: str, queries: int, per_query: int, seed: int) -> dict:
    import numpy as np
    import torch  # noqa: F401 - `padded` imports it: not in the first timed read

    from common.stores.representations import RepresentationStore

    folder = Path(folder)
    before = status_mb("RssAnon:")
    start = time.perf_counter()
    store = RepresentationStore.open(folder)
    open_s = time.perf_counter() - start
    opened_mb = status_mb("RssAnon:") - before
    count, take = len(store), min(per_query, len(store))
    rng = np.random.default_rng(seed)
    scattered = [rng.choice(count, size=take, replace=False) for _ in range(queries)]
    contiguous = [np.arange(s, s + take) for s in rng.integers(0, count - take + 1, size=queries)]

    def read_ms(reader, batches) -> float:
        start = time.perf_counter()
        for positions in batches:
            reader.padded([str(p) for p in positions.tolist()])
        return (time.perf_counter() - start) / len(batches) * 1e3

    def cold_then_warm(batches, kept=None) -> tuple[float, float]:
        """A fresh reader's pass after the files left the page cache, then its second pass (maps and pages held)."""
        reader = RepresentationStore.open(folder)
        reader._kept = kept or reader._kept
        evict_from_page_cache(path for path in folder.rglob("*") if path.is_file())
        return read_ms(reader, batches), read_ms(reader, batches)

    scattered_cold, scattered_warm = cold_then_warm(scattered)
    contiguous_cold, contiguous_warm = cold_then_warm(contiguous)
    _, lru_warm = cold_then_warm(scattered, kept=64)
    return {"open_s": open_s, "private_mb": opened_mb, "private_after_reads_mb": status_mb("RssAnon:") - before,
            "scattered_cold_ms": scattered_cold, "contiguous_cold_ms": contiguous_cold,
            "scattered_ms": scattered_warm, "contiguous_ms": contiguous_warm, "lru64_ms": lru_warm,
            "scatter_ratio": scattered_warm / contiguous_warm, "scatter_ratio_cold": scattered_cold / contiguous_cold,
            "shards_per_query": float(np.mean([len(np.unique(p // SHARD_SIZE)) for p in scattered])),
            "bytes_per_query": float(np.mean([sum(m.nbytes for m in store.get_many([str(i) for i in p.tolist()]))
                                              for p in scattered]))}


MEASURES = {"training_build": measure_training_build, "training_process": measure_training_process,
            "store_build": measure_store_build, "store_reads": measure_store_reads}


def extrapolate(rows: list[dict]) -> dict:
    """Each measure fitted linearly in the size, at MS MARCO's; what follows for 8 training processes and the stores."""
    out: dict = {"training": {}, "store": {}}
    measured = {part: [r for r in rows if r["part"] == part and not r.get("skipped")]
                for part in ("training", "store", "paper_store")}
    groups = {"training": ("candidates", CANDIDATES, ("build_s", "peak_mb", "column_bytes", "private_mb", "topics_mb",
                                                      "draw_us", "dicts_private_mb")),
              "store": ("documents", PASSAGES, ("build_s", "bytes", "open_s", "private_mb", "scattered_ms",
                                                "contiguous_ms", "scattered_cold_ms", "contiguous_cold_ms", "lru64_ms",
                                                "scatter_ratio", "scatter_ratio_cold"))}
    for part, (size_key, target, measures) in groups.items():
        for name in measures:
            points = sorted((r[size_key], r[name]) for r in measured[part] if r.get(name) is not None)
            fit = polyfit(points, 1)
            if fit is None:
                continue
            rise = fit["coefficients"][1] * (points[-1][0] - points[0][0])
            flat = abs(rise) < 0.02 * max(abs(points[-1][1]), 1e-12) or name.endswith(("_ms", "_us")) or "ratio" in name
            value = points[-1][1] if flat else float(fit_value(fit, target))
            out[part][name] = {"at_msmarco": significant(value), "cost": "flat" if flat else "linear",
                               "r2": round(fit["r2"], 4), "measured": [[x, significant(y)] for x, y in points]}
    if measured["training"] and "column_bytes" in out["training"]:
        last = max(measured["training"], key=lambda r: r["candidates"])
        ids = PASSAGES * last["doc_id_bytes"] + TRAIN_QUERIES * last["query_id_bytes"]  # at most every passage
        table = out["training"]["column_bytes"]["at_msmarco"] + ids
        topics = last["topics_mb"] / last["topics"] * TRAIN_TOPICS if last.get("topics") else 0.0
        private = out["training"]["private_mb"]["at_msmarco"] + topics
        out["table_at_msmarco"] = {"bytes": significant(table), "bytes_per_candidate": significant(table / CANDIDATES),
                                   "private_mb_per_process": significant(private),
                                   "of_which_topics_mb": significant(topics),
                                   "node_private_gib": significant(private * PROCESSES / 1024)}
        if "dicts_private_mb" in out["training"]:
            dicts = out["training"]["dicts_private_mb"]["at_msmarco"] + topics
            out["dicts_at_msmarco"] = {"private_mb_per_process": significant(dicts),
                                       "node_private_gib": significant(dicts * PROCESSES / 1024),
                                       "fits_1tb_node": dicts * PROCESSES * 2**20 < NODE_MEMORY}
    if measured["store"]:
        from common.stores.rows import row_dtype

        big = max(measured["store"], key=lambda r: r["documents"])
        id_bytes = (big["bytes"] - big["row_bytes"]) / big["documents"]  # ids, locations, shard indexes, manifest
        paper = next(iter(measured["paper_store"]), None)
        out["stores_at_paper_widths"] = {}
        for name, (width, rows_per_doc) in PAPER_STORES.items():
            row_bytes = row_dtype("float32", width).itemsize
            size = PASSAGES * (row_bytes * rows_per_doc + id_bytes)
            per_query = 1000 * row_bytes * rows_per_doc
            entry = {"bytes": significant(size), "fits_1tb_page_cache": size < NODE_MEMORY,
                     "read_bytes_per_query": significant(per_query)}
            for dtype in SMALLER_DTYPES:  # the same rows and ids, each row in its dtype's bytes
                rows_bytes = row_dtype(dtype, width).itemsize * rows_per_doc
                smaller = PASSAGES * (rows_bytes + id_bytes)
                entry[dtype] = {"bytes": significant(smaller), "fits_1tb_page_cache": smaller < NODE_MEMORY,
                                "read_bytes_per_query": significant(1000 * rows_bytes)}
            if paper is not None:  # the small store's per-query cost (lookups, copies) plus EARL S1's rest by bytes
                share = per_query / paper["bytes_per_query"]
                for when, key in (("cold", "scattered_cold_ms"), ("warm", "scattered_ms")):
                    entry[f"read_ms_per_query_{when}"] = significant(big[key] + (paper[key] - big[key]) * share)
            out["stores_at_paper_widths"][name] = entry
    return out


def build_parser():
    parser = benchmark_parser("python -m common.scale", __doc__.split("\n\n")[0], results="scale",
                              writes="scale.csv, scale.jsonl, scale.png and extrapolation.json", repeats=None,
                              repeats_help="unused: each measure is one pass over many items", devices=False,
                              seed="seed of the synthetic inputs", timeout=3600.0, child=True)
    add = parser.add_argument
    add("--candidates", type=positive_int, nargs="+", default=[1_000_000, 10_000_000, 50_000_000],
        help="training candidate lines measured")
    add("--dict_candidates", type=positive_int, nargs="*", default=[1_000_000, 10_000_000],
        help="sizes at which the sampler over dicts (before the table) is measured too")
    add("--per_query", type=positive_int, default=1000, help="candidates per training query")
    add("--draws", type=positive_int, default=10_000, help="groups drawn to time a draw")
    add("--documents", type=positive_int, nargs="+", default=[10_000, 100_000, 1_000_000],
        help="store sizes measured (documents)")
    add("--width", type=positive_int, default=32, help="stored row width (fp16 columns)")
    add("--rows", type=positive_int, default=8, help="mean rows per stored document")
    add("--paper_documents", type=int, default=10_000, help="documents of a store at EARL S1's width (768 fp32 "
        "columns, 76 rows a passage) whose reads are timed too (0: none; 10,000 take 2.3 GB)")
    add("--queries", type=positive_int, default=50, help="queries read per store pass")
    add("--per_query_read", type=positive_int, default=1000, help="candidates read per query")
    add("--work_dir", default=None, help="where the synthetic inputs go (default: a temporary folder)")
    add("--from_jsonl", type=existing_file, default=None,
        help="measure nothing: the rows of an earlier run's scale.jsonl, extrapolated and drawn again")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parse(build_parser(), argv)
    if args._one:
        return answer(args._one, lambda kind, **spec: MEASURES[kind](**spec))
    paths = output_paths(args.output_dir, "scale", ("csv", "jsonl", "png", "json"))
    paths["json"] = args.output_dir / "extrapolation.json"
    with Session(args, paths) as session:
        session.say(f"scale: {describe_machine()}")
        if args.from_jsonl:
            rows = [json.loads(line) for line in args.from_jsonl.read_text().splitlines()]
            return session.finish(rows, plot=plot, table=report, documents={"json": extrapolate(rows)})
        work = Path(args.work_dir or tempfile.mkdtemp(prefix="scale-"))
        rows = []
        try:
            for n in args.candidates:
                rows.append(session.emit(training_row(n, args, work), f"training: {n:,} candidates done"))
                shutil.rmtree(work / f"training-{n}", ignore_errors=True)
            for n in args.documents:
                rows.append(session.emit(store_row(n, args, work), f"store: {n:,} documents done"))
                shutil.rmtree(work / f"store-{n}", ignore_errors=True)
            if args.paper_documents:
                rows.append(session.emit(store_row(args.paper_documents, args, work, paper=True),
                                         "store at EARL S1's width done"))
                shutil.rmtree(work / f"store-{args.paper_documents}", ignore_errors=True)
        finally:
            if args.work_dir is None:
                shutil.rmtree(work, ignore_errors=True)
        return session.finish(rows, plot=plot, table=report, documents={"json": extrapolate(rows)})


def training_row(n: int, args, work: Path) -> dict:
    folder = work / f"training-{n}"
    files = write_training_files(folder / "input", n, args.per_query, args.seed)
    spec = {"paths": files, "cache": str(folder / "cache")}
    process = {"kind": "training_process", **spec, "draws": args.draws}
    row = {"part": "training", "candidates": n, "per_query": args.per_query, **machine()}
    row |= measure_in_child(MODULE, {"kind": "training_build", **spec}, args.timeout)
    row |= measure_in_child(MODULE, {**process, "dicts": False}, args.timeout)
    if n in args.dict_candidates:
        dicts = measure_in_child(MODULE, {**process, "dicts": True}, args.timeout)
        row |= {f"dicts_{key}": value for key, value in dicts.items()}
    if row.get("bytes"):
        row["bytes_per_candidate"] = row["bytes"] / n
    return row


def store_row(n: int, args, work: Path, paper: bool = False) -> dict:
    folder = str(work / f"store-{n}")
    width, rows, dtype = (*PAPER_STORES["earl_s1"], "float32") if paper else (args.width, args.rows, "float16")
    row = {"part": "paper_store" if paper else "store", "documents": n, "width": width, "mean_rows": rows,
           "dtype": dtype, **machine()}
    row |= measure_in_child(MODULE, {"kind": "store_build", "folder": folder, "documents": n, "width": width,
                                     "rows": rows, "seed": args.seed, "dtype": dtype}, args.timeout)
    row |= measure_in_child(MODULE, {"kind": "store_reads", "folder": folder, "queries": args.queries,
                                       "per_query": args.per_query_read, "seed": args.seed}, args.timeout)
    return row


def report(rows: list[dict]) -> str:
    lines = []
    for r in rows:
        if r.get("skipped"):
            lines.append(f"{r['part']}: skipped ({r['skipped']})")
        elif r["part"] == "training":
            dicts = f" (dicts: {r['dicts_private_mb']:,.0f} MB)" if "dicts_private_mb" in r else ""
            lines.append(f"training {r['candidates']:>11,}: build {r['build_s']:8.1f} s, {r['bytes_per_candidate']:.2f}"
                         f" B/candidate, builder peak {r['peak_mb']:,.0f} MB, process private {r['private_mb']:,.1f} MB"
                         f"{dicts}, draw {r['draw_us']:.0f} us")
        else:
            lines.append(f"store {r['documents']:>11,}: build {r['build_s']:7.1f} s, {r['bytes'] / 2**20:,.1f} MiB, "
                         f"open {r['open_s'] * 1e3:.1f} ms, private {r['private_mb']:.1f} MB, per query: scattered "
                         f"{r['scattered_ms']:.1f} ms, contiguous {r['contiguous_ms']:.1f} ms, 64 maps "
                         f"{r['lru64_ms']:.1f} ms")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path, overwrite: bool) -> None:
    training = [r for r in rows if r["part"] == "training" and not r.get("skipped")]
    store = [r for r in rows if r["part"] == "store" and not r.get("skipped")]
    panels = [
        Panel("training: private memory per process", "candidates", "MB", [
            Line("table (mapped)", [(r["candidates"], max(r["private_mb"], 0.1)) for r in training]),
            Line("dicts (before)", [(r["candidates"], r["dicts_private_mb"]) for r in training
                                    if "dicts_private_mb" in r], "x--")]),
        Panel("training: build", "candidates", "seconds / bytes per candidate", [
            Line("build s", [(r["candidates"], r["build_s"]) for r in training]),
            Line("bytes/candidate", [(r["candidates"], r["bytes_per_candidate"]) for r in training], "s--")]),
        Panel("store: rows of 1,000 candidates read", "documents", "ms", [
            Line("scattered", [(r["documents"], r["scattered_ms"]) for r in store]),
            Line("contiguous", [(r["documents"], r["contiguous_ms"]) for r in store], "s--"),
            Line("scattered, from the disk", [(r["documents"], r["scattered_cold_ms"]) for r in store], "o:"),
            Line("scattered, 64 maps (before)", [(r["documents"], r["lru64_ms"]) for r in store], "x:")]),
        Panel("store: open", "documents", "ms / MB", [
            Line("open ms", [(r["documents"], r["open_s"] * 1e3) for r in store]),
            Line("private MB", [(r["documents"], max(r["private_mb"], 0.1)) for r in store], "s--")]),
    ]
    draw(panels, path, columns=2, title=f"common.scale ({rows[0].get('cpu', '')})", overwrite=overwrite)


if __name__ == "__main__":
    sys.exit(main())
