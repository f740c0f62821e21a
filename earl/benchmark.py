"""``python -m earl.benchmark``: milliseconds to rank one query's N candidates with the BERT ranker, EARL S1 and EARL S2
(Gao, Dai, Callan 2020, Sec. 5.2, Table 3), beside Table 1's cost (`earl.costs.Size`) and counted FLOPs, with what
reading EARL's stored rows costs a user beside the compute.

Timed per query of 16 tokens (Sec. 5.2), random weights (timing does not depend on them), inference mode:
``bert_ranker``, `BertRanker` over ``[CLS] query [SEP] document [SEP]`` in batches of ``--batch_size``, timed on
``--ranker_candidates`` candidates and scaled linearly to N (each is the same work); ``earl_s1``, T_qry once, then per
batch of ``--earl_batch_size`` candidates their rows of D looked up in a store and copied into a preallocated tensor,
their keys and values (the n^2 d term S2 saves; ``--keys_values fused`` stacks the 2K projections into one product,
to the same values) and `EARL.judge`; ``earl_s2``, the same from a store of D' (Eq. 25).

The store is what a user has (`earl.store.random_stores`): ``--store_documents`` documents (100,000 by default) of
n rows each, at the model's width, fp16 by default, in shards of 1,000 documents (the index commands' default), read
through `common.stores.representations` (the sorted id table searched, every shard mapped once and kept). Each timed
query's candidates are what a BM25 top N gives, N distinct documents drawn uniformly at random over the store, a new
draw every repeat (`common.benchmarking.draw_candidates`, ``default_rng((seed, repeat))``): they scatter over about
min(N, shards) shards and no repeat reads rows an earlier one left in memory. A warm-up maps the shards that a draw
of its own falls in, as a server that has run a while has them, and runs the compute once, reading no row; then, just
before the timed queries, the store's files are written back and dropped from the page cache
(``posix_fadvise(POSIX_FADV_DONTNEED)``), so on Linux the first touch of a row is a disk read (cold).
``store_cached`` is the share of the store's pages still cached when the timing starts (``mincore``: near 0 where
the eviction worked, the id table's pages the warm-up searched; 1 on a file system kept in memory).

Disk: one store at a time, each removed once measured unless ``--store_dir`` keeps them, and none larger than
``--store_gb`` (28 GB by default): a store whose ``--store_documents`` would not fit holds as many as do (the row's
``store_documents``). At the defaults (fp16) that is 100,000 documents for base S1 at d = 128 (19.7 GB), 71,207 and
35,603 at d = 256 and 512, and 35,603, 17,801 and 8,900 for base S2 (3,072 columns: 3.1 MB a document at d = 512,
315 GB for 100,000); small S1 holds 100,000 at every length, small S2 100,000, 53,405 and 26,702.

``ms`` is the median query's wall clock (of ``--repeats``, after the warm-up); ``read_ms`` its store reads (the id
lookup and the copy into the batch tensor, fp16 rows converted to fp32 included) and ``compute_ms`` the rest (T_qry,
keys and values, the judge: the compute alone), so ``ms = read_ms + compute_ms``; ``warm_read_ms`` reads the same
candidates again, their rows now in the page cache (a store held in memory, as this benchmark read it before, in
store order then). ``speedup`` is the BERT ranker's ms over the row's, ``compute_speedup`` over its compute alone;
``cpu_ms`` is the median process CPU time (with ``--threads 1`` the steadier measure on a shared machine; a disk wait
is not CPU time), with EARL's compute parts (``query_ms``, ``keys_values_ms``, ``judge_ms``, the median query's);
``flops`` are FlopCounterMode's counts of the very calls timed, scaled to N; ``analytic_ratio`` and ``table1_ratio``
are Table 1's ratio in multiply-adds and with every constant 1.
"""

from __future__ import annotations

import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common.benchmarking import (
    Line, Panel, PartTimes, Session, add_store_options, benchmark_parser, bert_pairs, bert_query, cached_fraction,
    check_store_options, count_flops, describe_machine, draw, draw_candidates, evict_from_page_cache, machine,
    median_query, output_paths, parse, rounded, wall_and_cpu_ms,
)
from common.refusals import positive_float, positive_int, usage_error
from earl.costs import TABLE1, Size

IMPLS = ("bert_ranker", "earl_s1", "earl_s2")
STRATEGY = {"earl_s1": "s1", "earl_s2": "s2"}
RESULTS = Path(__file__).resolve().parents[1] / "results" / "earl"
QUERY_LENGTH = 16  # Sec. 5.2: "we fixed query length at 16"
DTYPES = ("fp32", "fp16")  # earl.store.ROW_TYPES, not imported here: earl.store loads torch, and --help must not
PARTS = ("query_ms", "read_ms", "keys_values_ms", "judge_ms")  # EARL's, timed by `EarlScorer`
SIZES = {"base": Size(layers=12, hidden=768, heads=12, intermediate=3072, blocks=2, query_layers=10),  # the paper's
         "small": Size(layers=4, hidden=256, heads=4, intermediate=1024, blocks=2, query_layers=2)}  # head width 64
ITEM_BYTES = {"fp32": 4, "fp16": 2}
SHARD_SIZE = 1000  # documents per shard: the index commands' default (--shard_size)
STORE_GB = 28.0
TABLE = (("size", ""), ("impl", ""), ("n", "d"), ("ms", ".1f"), ("read_ms", ".1f"), ("compute_ms", ".1f"),
         ("warm_read_ms", ".1f"), ("speedup", ".1f"), ("compute_speedup", ".1f"), ("cpu_ms", ".1f"),
         ("cpu_speedup", ".1f"), ("analytic_ratio", ".1f"), ("table1_ratio", ".1f"), ("flop_ratio", ".1f"),
         ("gflops_per_s", ".1f"), ("store_documents", ","), ("store_cached", ".2f"), ("measured_candidates", "d"),
         ("load_1min", ".1f"))


def store_bytes_per_document(size: Size, strategy: str, n: int, dtype: str) -> int:
    """Bytes of one document of n rows in a `strategy` store at `size`: h columns (S1) or 2·K·h (S2, Eq. 25)."""
    return n * size.hidden * (1 if strategy == "s1" else 2 * size.blocks) * ITEM_BYTES[dtype]


def store_documents(size: Size, strategy: str, n: int, args) -> int:
    """The documents of the store a row is measured on: ``--store_documents``, or as many as ``--store_gb`` holds."""
    return min(args.store_documents, int(args.store_gb * 1e9 // store_bytes_per_document(size, strategy, n,
                                                                                         args.dtype)))


def candidate_ids(positions) -> list[str]:
    """The doc ids of store positions (`earl.store.random_stores` names document i ``d{i}``)."""
    return [f"d{position}" for position in positions.tolist()]


def store_files(store) -> list[Path]:
    """Every file of `store`'s folder: its shards, id table and manifest."""
    return sorted(path for path in store.folder.iterdir() if path.is_file())


def build_models(size: Size, max_length: int, seed: int):
    """EARL and the BERT ranker of `size`, random weights from `seed`, in eval mode; the ranker's BERT is EARL's
    T_doc (T_qry and the judge blocks are built from it, Sec. 3.4)."""
    from common.benchmarking import BERT_PAD, BERT_VOCAB_SIZE
    from common.encoders.bert_rankers import BertRanker
    from common.encoders.pretrained import from_scratch_bert
    from earl.model import build_earl

    bert = from_scratch_bert(seed, vocab_size=BERT_VOCAB_SIZE, pad_token_id=BERT_PAD, dropout=0.1,
                             max_length=max_length, **size.options())
    return build_earl(bert, num_blocks=size.blocks, query_layers=size.query_layers).eval(), BertRanker(bert).eval()


def fused_keys_values(model):
    """`EARL.document_keys_values` as one matrix product: every block's key and value projections stacked into one
    (2 K h, h) weight, built once, so D' = D W^T + b in one pass over D, in the same layout and to the same values
    (the model's call runs 2 K products of width h and concatenates them, another write and read of D')."""
    import torch
    import torch.nn.functional as F

    weight = torch.cat([p for block in model.blocks for p in (block.cross.key.weight, block.cross.value.weight)])
    bias = torch.cat([p for block in model.blocks for p in (block.cross.key.bias, block.cross.value.bias)])
    return lambda documents: F.linear(documents, weight, bias)


class EarlScorer:
    """Scores one query against candidates from a store as timed: T_qry once, then per batch of `batch_size`
    candidates (each exactly `n` rows) their rows looked up at once and copied into a preallocated tensor (fp16
    rows then converted to fp32), keys and values (S1 only:
    `fused_keys_values`, or `EARL.document_keys_values` with `keys_values` ``model``) and the judge. After a call
    ``parts.ms`` holds its milliseconds of query encoding, reads, keys and values, and judge (`PARTS`)."""

    def __init__(self, model, store, impl: str, n: int, batch_size: int, keys_values: str = "fused"):
        import torch

        if impl not in STRATEGY or keys_values not in ("fused", "model"):
            raise ValueError(f"EarlScorer scores earl_s1 or earl_s2 with fused or model keys and values, not {impl!r} "
                             f"with {keys_values!r}")
        self.model, self.store, self.impl, self.n, self.batch_size = model, store, impl, n, batch_size
        self.keys_values = fused_keys_values(model) if keys_values == "fused" else model.document_keys_values
        stored = torch.float16 if store.dtype == "float16" else torch.float32
        self.rows = torch.zeros(batch_size, n, store.width, dtype=stored)
        self.rows_numpy = self.rows.numpy()  # the same memory: numpy copies the memory map's rows into it
        self.compute = self.rows if stored == torch.float32 else torch.zeros(batch_size, n, store.width)
        self.doc_mask = torch.ones(batch_size, n, dtype=torch.bool)
        self.query_index = torch.zeros(batch_size, dtype=torch.long)
        self.parts = PartTimes(PARTS)

    def read(self, ids: list[str]):
        """The candidates' rows as a (len(ids), n, width) fp32 tensor (the preallocated buffer's first rows)."""
        import numpy as np

        for i, matrix in enumerate(self.store.get_many(ids)):
            np.copyto(self.rows_numpy[i], matrix)
        if self.compute is not self.rows:
            self.compute[: len(ids)].copy_(self.rows[: len(ids)])
        return self.compute[: len(ids)]

    def warm(self, ids: list[str]) -> None:
        """Read every candidate's rows once, in batches as scoring does: their shards are then mapped and their
        pages in the page cache."""
        for start in range(0, len(ids), self.batch_size):
            self.read(ids[start : start + self.batch_size])

    def warm_up(self, tokens, mask, ids: list[str]) -> None:
        """Map the shards that `ids` fall in, touching none of their rows, and run T_qry and the judge once on a
        batch of zero rows: the first calls' costs paid, nothing read into the page cache."""
        self.store.get_many(ids)  # views of the shards' maps: no row is read
        self.judge_batch(self.model.encode_queries(tokens, mask), mask.bool(), self.compute)

    def judge_batch(self, queries, query_mask, rows):
        """Scores of one batch of candidates from their rows (D for S1, D' for S2); times its two parts."""
        with self.parts("keys_values_ms"):
            keys_values = self.keys_values(rows) if self.impl == "earl_s1" else rows
        with self.parts("judge_ms"):
            count = len(rows)
            return self.model.judge(queries, query_mask, keys_values, self.doc_mask[:count], self.query_index[:count])

    def __call__(self, tokens, mask, ids: list[str]):
        """Scores (len(ids),) of the candidates `ids` for the query `tokens` (1, q) with `mask`."""
        import torch

        self.parts = PartTimes(PARTS)
        with self.parts("query_ms"):
            queries, query_mask = self.model.encode_queries(tokens, mask), mask.bool()  # (1, q, h): once per query
        scores = torch.empty(len(ids))
        for first in range(0, len(ids), self.batch_size):
            with self.parts("read_ms"):
                rows = self.read(ids[first : first + self.batch_size])
            scores[first : first + len(rows)] = self.judge_batch(queries, query_mask, rows)
        return scores


def earl_flops(scorer: EarlScorer, tokens, mask, ids: list[str], candidates: int) -> int:
    """FLOPs of scoring `candidates` candidates as `scorer` does: T_qry once, per call (the first block's query
    projection) once per batch, per candidate the rest, from counts on 1 and 2 candidates."""
    queries = scorer.model.encode_queries(tokens, mask)
    query = count_flops(lambda: scorer.model.encode_queries(tokens, mask))
    one, two = (count_flops(lambda k=k: scorer.judge_batch(queries, mask.bool(), scorer.read(ids[:k])))
                for k in (1, 2))
    return query + math.ceil(candidates / scorer.batch_size) * (2 * one - two) + candidates * (two - one)


def measure_ranker(ranker, n: int, args, timed: bool) -> dict:
    """The BERT ranker's FLOPs on N pairs (counted on one; every row's ratio is to them) and, where `timed`, its time on
    min(--ranker_candidates, N) pairs, scaled to N."""
    import torch

    from earl.store import document_words

    measured = min(args.ranker_candidates, args.candidates)
    pairs = bert_pairs(bert_query(QUERY_LENGTH, args.seed)[0], document_words(n, measured, args.seed))
    batches = [{k: v[i : i + args.batch_size] for k, v in pairs.items()} for i in range(0, measured, args.batch_size)]
    with torch.inference_mode():
        flops = count_flops(lambda: ranker({k: v[:1] for k, v in pairs.items()})) * args.candidates
        if not timed:
            return {"flops": flops}
        ranker(batches[0])  # warm-up
        ms, cpu_ms = wall_and_cpu_ms(lambda: torch.cat([ranker(batch) for batch in batches]), args.repeats)
    scale = args.candidates / measured
    return {"ms": ms * scale, "cpu_ms": cpu_ms * scale, "measured_candidates": measured, "flops": flops}


def measure_earl(model, store, impl: str, n: int, args) -> dict:
    """Time EARL S1 or S2 (`impl`) on N candidates drawn over `store` afresh for each query (`draw_candidates`),
    cold (the module docstring): a warm-up (`EarlScorer.warm_up`: the shards of a draw of its own mapped, the
    compute run once, no row read), the store dropped from the page cache, then ``--repeats`` timed queries; ``ms``
    and its parts are the median query's (`median_query`), ``warm_read_ms`` the median of the same candidates read
    again, the FLOPs `earl_flops`."""
    import numpy as np
    import torch

    (tokens, mask), documents = bert_query(QUERY_LENGTH, args.seed), len(store)
    draws = [draw_candidates(documents, args.candidates, args.seed, repeat) for repeat in range(args.repeats + 1)]
    *timed, warm_up = [candidate_ids(positions) for positions in draws]  # the warm-up's draw is the last
    scorer = EarlScorer(model, store, impl, n, min(args.earl_batch_size, args.candidates), args.keys_values)
    files, records, warm_reads = store_files(store), [], []
    with torch.inference_mode():
        scorer.warm_up(tokens, mask, warm_up)
        evict_from_page_cache(files)  # after the mapping: pages a process has mapped in would stay
        cached = cached_fraction(files)
        for ids in timed:
            wall, cpu = time.perf_counter(), time.process_time()
            scorer(tokens, mask, ids)
            records.append({"ms": (time.perf_counter() - wall) * 1000, "cpu_ms": (time.process_time() - cpu) * 1000,
                            **scorer.parts.ms})
        for ids in timed:  # the same rows again: in the page cache now
            wall = time.perf_counter()
            scorer.warm(ids)
            warm_reads.append((time.perf_counter() - wall) * 1000)
        flops = earl_flops(scorer, tokens, mask, timed[0], args.candidates)
    median = median_query(records)
    shards = [len(np.unique(positions // store.manifest["shard_size"])) for positions in draws[:-1]]
    return {**median, "cpu_ms": statistics.median(r["cpu_ms"] for r in records),
            "compute_ms": median["ms"] - median["read_ms"], "warm_read_ms": statistics.median(warm_reads),
            "measured_candidates": args.candidates, "flops": flops, "store_documents": documents,
            "store_gb": store.manifest["bytes"] / 1e9, "candidate_shards": statistics.median(shards),
            "store_cached": cached, "store_bytes_per_document": store.bytes_per_document}


def make_row(impl: str, size_name: str, n: int, result: dict, ranker: dict, args) -> dict:
    """One output row: the measurement, its ratios to the BERT ranker's (`ranker`: its FLOPs, and its time where it was
    timed) and Table 1's (`earl.costs.Size.ratio`), the store read, the setting."""
    size, N, ms, flops = SIZES[size_name], args.candidates, result["ms"], result["flops"]
    earl, s1 = impl != "bert_ranker", impl == "earl_s1"
    ranker_ms, ranker_cpu_ms = ranker.get("ms"), ranker.get("cpu_ms")
    compute_ms = result.get("compute_ms", ms)  # the BERT ranker's time is all compute
    return {"bench": "earl_speed", "impl": impl, "size": size_name, "n": n, "pass": "infer", "ms": round(ms, 3),
            "read_ms": rounded(result.get("read_ms"), 3), "compute_ms": round(compute_ms, 3),
            "warm_read_ms": rounded(result.get("warm_read_ms"), 3),
            "candidates": N, "measured_candidates": result["measured_candidates"],
            "extrapolated": result["measured_candidates"] < N, "speedup": rounded(ranker_ms and ranker_ms / ms, 2),
            "compute_speedup": rounded(ranker_ms and ranker_ms / compute_ms, 2),
            "cpu_ms": round(result["cpu_ms"], 3),
            "cpu_speedup": rounded(ranker_cpu_ms and ranker_cpu_ms / result["cpu_ms"], 2),
            "analytic_ratio": round(size.ratio(impl, QUERY_LENGTH, n, N), 2),
            "table1_ratio": round(size.ratio(impl, QUERY_LENGTH, n, N, TABLE1), 2),
            "flop_ratio": round(ranker["flops"] / flops, 2),
            "affordable_candidates": math.floor(N * ms / ranker_ms) if ranker_ms and earl else None,
            "query_ms": rounded(result.get("query_ms"), 3),
            "keys_values_ms": rounded(result.get("keys_values_ms"), 3) if s1 else None,
            "keys_values": args.keys_values if s1 else None, "judge_ms": rounded(result.get("judge_ms"), 3),
            "flops": flops, "analytic_macs": round(size.cost(impl, QUERY_LENGTH, n, N)),
            "gflops_per_s": round(flops / ms / 1e6, 2), "compute_gflops_per_s": round(flops / compute_ms / 1e6, 2),
            "store_dtype": args.dtype if earl else None,
            "store_bytes_per_document": result.get("store_bytes_per_document"),
            "store_documents": result.get("store_documents"), "store_gb": rounded(result.get("store_gb"), 3),
            "shard_size": SHARD_SIZE if earl else None, "candidate_shards": result.get("candidate_shards"),
            "store_cached": rounded(result.get("store_cached"), 4), "documents": args.documents if earl else None,
            "batch_size": min(args.earl_batch_size, N) if earl else args.batch_size, "query_length": QUERY_LENGTH,
            **size.options(), "judge_blocks": size.blocks, "query_layers": size.query_layers,
            "repeats": args.repeats, **machine()}


def plot(rows: list[dict], path: Path, overwrite: bool) -> None:
    """Seconds per query against n, log scale, one panel per size, one line per implementation (dashed where
    extrapolated), EARL's points labelled with their speed-up and its compute alone dotted beside them."""
    panels = []
    for size_name in dict.fromkeys(r["size"] for r in rows):
        first, lines = next(r for r in rows if r["size"] == size_name), []
        for impl, color in zip(IMPLS, ("C3", "C0", "C2")):
            mine = sorted((r["n"], r) for r in rows if (r["size"], r["impl"]) == (size_name, impl))
            scaled = any(r["extrapolated"] for _, r in mine)
            lines.append(Line(impl + scaled * " (timed on fewer, scaled)", style="o--" if scaled else "o-",
                              color=color, points=[(n, r["ms"] / 1000, impl != "bert_ranker" and r["speedup"] and
                                                    f"{r['speedup']:.0f}x") for n, r in mine]))
            if impl != "bert_ranker":
                lines.append(Line(f"{impl}, compute alone (no store read)", style="x:", color=color,
                                  points=[(n, r["compute_ms"] / 1000) for n, r in mine]))
        panels.append(Panel(f"{size_name}: {SIZES[size_name].describe()}\nq = {QUERY_LENGTH}, {first['cpu']}, "
                            f"{first['threads']} thread(s)", "document length d (tokens)",
                            f"seconds per query ({first['candidates']} candidates)", lines, ticks=True))
    draw(panels, path, overwrite=overwrite)


def parse_args(argv: list[str] | None):
    parser = benchmark_parser(
        "python -m earl.benchmark", "EARL Table 3: milliseconds to rank one query (16 tokens) against N candidates "
        "with the BERT ranker, EARL S1 (stores D) and EARL S2 (stores D'), by document length, with the speed-ups "
        "beside Table 1's analytic cost ratio and the counted FLOP ratio. EARL's candidates are drawn at random "
        "over a store of --store_documents documents, afresh for each query, and read cold (dropped from the page "
        "cache first): read_ms beside compute_ms. Disk: one store at a time, at most --store_gb (28 GB by default; "
        "at the defaults base S1 at d = 128 holds 100,000 documents in 19.7 GB, the larger rows fewer), under "
        "--store_dir or $TMPDIR.", results=RESULTS,
        writes="speed.csv, speed.jsonl and speed.png", repeats=3, repeats_help="timed queries (the median is reported)",
        devices=False, seed="seeds the weights, the token ids, the noise and the candidates' draws")
    add = parser.add_argument
    add("--size", nargs="+", default=["base"], choices=tuple(SIZES), help="model sizes, each measured in turn: base = "
        "BERT-base with K=2, l=10 (the paper's); small = L=4, h=256, 4 heads, FFN 1024, K=2, l=2")
    add("--lengths", type=positive_int, nargs="+", default=[128, 256, 512], metavar="N",
        help="document lengths in tokens ([CLS] included), each at least 2")
    add("--impls", nargs="+", default=list(IMPLS), choices=IMPLS, metavar="IMPL",
        help=f"implementations, of {', '.join(IMPLS)} (the speed-ups need bert_ranker)")
    add("--candidates", type=positive_int, default=1000, help="candidates per query, N")
    add("--ranker_candidates", type=positive_int, default=32, help="candidates the BERT ranker is timed on")
    add("--batch_size", type=positive_int, default=8, help="BERT ranker pairs per forward pass (and T_doc's)")
    add("--earl_batch_size", type=positive_int, default=100, help="EARL candidates per judge call")
    add("--keys_values", choices=("fused", "model"), default="fused", help="S1's keys and values: one product of "
        "the stacked weights (fused) or EARL.document_keys_values (model: 2K products and a concatenation)")
    add("--dtype", choices=DTYPES, default="fp16", help="the stores' rows (fp16: half fp32's disk and bytes read, "
        "converted to fp32 once read, in read_ms)")
    add("--documents", choices=("encoded", "random"), default="random",
        help="the stores' rows: seeded noise of the model's width (random: written at disk speed, the same timing) "
        "or T_doc on random token ids (encoded: T_doc over every stored document, hours at base size for 100,000: "
        "for a small --store_documents)")
    add_store_options(parser, "each store", capped_by="--store_gb cannot hold them")
    add("--store_gb", type=positive_float, default=STORE_GB, help="the most disk one store takes, in GB (10^9 "
        "bytes): a store of larger rows holds fewer documents (the row's store_documents)")
    args = parse(parser, argv)
    if min(args.lengths) < 2:
        usage_error(f"argument --lengths: each must be at least 2 ([CLS] and a word), got {min(args.lengths)}")
    check_store_options(args)
    for size_name in args.size:
        for n in args.lengths:
            for impl in (impl for impl in STRATEGY if impl in args.impls):
                size, strategy = SIZES[size_name], STRATEGY[impl]
                if store_documents(size, strategy, n, args) < args.candidates:
                    each = store_bytes_per_document(size, strategy, n, args.dtype)
                    usage_error(f"argument --store_gb: {args.store_gb:g} GB holds fewer than the --candidates "
                                f"{args.candidates} documents a query draws of size {size_name}, {strategy.upper()}, "
                                f"d = {n} ({each:,} bytes each)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with Session(args, output_paths(args.output_dir, "speed")) as session:
        session.say(f"EARL speed: {', '.join(args.size)}; lengths {args.lengths}; {args.candidates} candidates (BERT "
                    f"ranker timed on {min(args.ranker_candidates, args.candidates)}) drawn over stores of up to "
                    f"{args.store_documents:,} {args.dtype} documents, read cold; {describe_machine()}")
        from earl.store import random_stores

        def emit(row: dict) -> dict:
            read = "" if row["read_ms"] is None else f" ({row['read_ms']:.1f} reading, {row['compute_ms']:.1f} compute)"
            return session.emit(row, f"{row['size']} {row['impl']:>11} n={row['n']}: {row['ms']:.1f} ms/query{read}"
                                + ("" if row["speedup"] is None else f", {row['speedup']:.1f}x"))

        rows, wanted = [], [impl for impl in STRATEGY if impl in args.impls]
        for size_name in args.size:
            size = SIZES[size_name]
            # q + d positions: 528 at d = 512, past BERT's 512 (random weights: nothing is lost)
            model, ranker = build_models(size, QUERY_LENGTH + max(args.lengths), args.seed)
            weights = f"random weights, seed {args.seed}, size {size_name} ({size.describe()})"
            for n in args.lengths:
                bert = measure_ranker(ranker, n, args, timed="bert_ranker" in args.impls)  # its FLOPs at least
                if "ms" in bert:
                    rows.append(emit(make_row("bert_ranker", size_name, n, bert, bert, args)))
                for impl in wanted:
                    strategy, count = STRATEGY[impl], store_documents(size, STRATEGY[impl], n, args)
                    each = store_bytes_per_document(size, strategy, n, args.dtype)
                    capped = "" if count == args.store_documents else ", all --store_gb holds"
                    session.log(f"{size_name} {impl:>11} n={n}: building a store of {count:,} documents "
                                f"({count * each / 1e9:.2f} GB{capped})")
                    # without --store_dir the store is temporary: its disk freed before the next one is built
                    with tempfile.TemporaryDirectory(prefix="earl_store_") as temporary:
                        store = random_stores(args.store_dir or Path(temporary), model, name=size_name,
                                              checkpoint=weights, strategies=[strategy], n=n, count=count,
                                              dtype=args.dtype, documents=args.documents, seed=args.seed,
                                              shard_size=SHARD_SIZE, batch_size=args.batch_size,
                                              keys_values=fused_keys_values(model))[strategy]
                        result = measure_earl(model, store, impl, n, args)
                        del store  # its shards' maps, before the folder goes
                    rows.append(emit(make_row(impl, size_name, n, result, bert, args)))
        return session.finish(rows, plot=plot, table=TABLE)


if __name__ == "__main__":
    sys.exit(main())
