"""``python -m earl.benchmark``: milliseconds to rank one query's N candidates with the BERT ranker, EARL S1 and EARL S2
(Gao, Dai, Callan 2020, Sec. 5.2, Table 3), beside Table 1's cost (`earl.costs.Size`) and counted FLOPs, with what
reading EARL's stored rows costs a user beside the compute.

Queries of 16 tokens (Sec. 5.2), random weights: ``bert_ranker`` over pairs of at most 512 tokens, timed on
``--ranker_candidates`` and scaled to N; ``earl_s1``/``earl_s2`` run `earl.query_scorer.QueryScorer`'s calls on D or D'
(Eq. 25) rows read cold from a store of seeded documents, N candidates drawn afresh each repeat. ``ms = read_ms +
compute_ms`` (the median query); ``warm_ms`` with the rows cached. docs/earl_benchmark.md has the details.
"""

from __future__ import annotations

import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common.benchmarks.bert_inputs import bert_pairs, bert_query
from common.benchmarks.machine import describe_machine, machine
from common.benchmarks.options import benchmark_parser, parse
from common.benchmarks.plots import Line, Panel, draw
from common.benchmarks.session import Session, output_paths, rounded
from common.benchmarks.store_reads import (
    StoreReads, add_store_options, candidate_ids, check_store_options, cold_then_warm, draw_candidates, median_query,
)
from common.benchmarks.timing import PartTimes, count_flops, wall_and_cpu_ms
from common.refusals import positive_float, positive_int, usage_error
from earl.costs import TABLE1, Size

IMPLS = ("bert_ranker", "earl_s1", "earl_s2")
STRATEGY = {"earl_s1": "s1", "earl_s2": "s2"}
QUERY_LENGTH = 16  # Sec. 5.2: "we fixed query length at 16"
BERT_POSITIONS = 512  # BERT's position table: the most tokens the ranker's pair (and T_doc's document) can hold
RANKER_WORDS = BERT_POSITIONS - QUERY_LENGTH - 1  # 495: the document words a ranker's pair holds beside its [SEP]
BATCH_SIZE = 128  # earl.evaluate's default --batch_size (candidates per judge batch): both implementations' batch
DTYPES = ("fp32", "fp16", "int8")  # earl.store.ROW_TYPES, not imported here: earl.store loads torch, and --help must not
PARTS = ("query_ms", "read_ms", "keys_values_ms", "judge_ms")  # EARL's, timed by `EarlScorer`
SIZES = {"base": Size(layers=12, hidden=768, heads=12, intermediate=3072, blocks=2, query_layers=10),  # the paper's
         "small": Size(layers=4, hidden=256, heads=4, intermediate=1024, blocks=2, query_layers=2)}  # head width 64
SHARD_SIZE = 1000  # documents per shard: the index commands' default (--shard_size)
#: The most disk one store takes by default, in GB: base S2 at d = 512 still holds 1,000 candidates (1,271 documents).
STORE_GB = 4.0
TABLE = (("size", ""), ("impl", ""), ("n", "d"), ("ms", ".1f"), ("read_ms", ".1f"), ("compute_ms", ".1f"),
         ("warm_ms", ".1f"), ("warm_read_ms", ".1f"), ("speedup", ".1f"), ("compute_speedup", ".1f"),
         ("warm_speedup", ".1f"), ("cpu_ms", ".1f"), ("cpu_speedup", ".1f"), ("analytic_ratio", ".1f"),
         ("table1_ratio", ".1f"), ("flop_ratio", ".1f"), ("gflops_per_s", ".1f"), ("store_documents", ","),
         ("store_cached", ".2f"), ("measured_candidates", "d"), ("batch_size", "d"), ("ranker_tokens", "d"),
         ("load_1min", ".1f"))


def store_bytes_per_document(size: Size, strategy: str, n: int, dtype: str) -> int:
    """Bytes of one document of n rows in a `strategy` store at `size`: h columns (S1) or 2·K·h (S2, Eq. 25) of 4
    bytes (fp32) or 2 (fp16), or int8's one byte each after a 4-byte scale (`common.stores.rows`)."""
    width = size.hidden * (1 if strategy == "s1" else 2 * size.blocks)
    return n * (width + 4 if dtype == "int8" else width * {"fp32": 4, "fp16": 2}[dtype])


def store_documents(size: Size, strategy: str, n: int, args) -> int:
    """The documents of the store a row is measured on: ``--store_documents``, or as many as ``--store_gb`` holds."""
    each = store_bytes_per_document(size, strategy, n, args.dtype)
    return min(args.store_documents, int(args.store_gb * 1e9 // each))


def ranker_words(n: int) -> int:
    """The document words of the BERT ranker's pair at document length n: n - 1, at most `RANKER_WORDS`."""
    return min(n - 1, RANKER_WORDS)


def ranker_tokens(n: int) -> int:
    """The BERT ranker's pair length at document length n: the query's 16 tokens, the words and [SEP] (at most 512)."""
    return QUERY_LENGTH + ranker_words(n) + 1


def analytic_cost(size: Size, impl: str, n: int, candidates: int, constants=None) -> float:
    """Table 1's cost of `impl` at document length n (`Size.cost`), the BERT ranker's at the tokens it reads."""
    d = ranker_tokens(n) - QUERY_LENGTH if impl == "bert_ranker" else n
    return size.cost(impl, QUERY_LENGTH, d, candidates, constants)


def earl_batch_size(args) -> int:
    """EARL's candidates per judge call: ``--earl_batch_size``, by default ``--batch_size``."""
    return args.earl_batch_size or args.batch_size


def build_models(size: Size, seed: int):
    """EARL and the BERT ranker of `size` (its BERT is EARL's T_doc, Sec. 3.4), random weights from `seed`."""
    from common.benchmarks.bert_inputs import BERT_PAD, BERT_VOCAB_SIZE
    from common.encoders.bert_rankers import BertRanker
    from common.encoders.pretrained import from_scratch_bert
    from earl.model import build_earl

    bert = from_scratch_bert(seed, vocab_size=BERT_VOCAB_SIZE, pad_token_id=BERT_PAD, dropout=0.1,
                             max_length=BERT_POSITIONS, **size.options())
    return build_earl(bert, num_blocks=size.blocks, query_layers=size.query_layers).eval(), BertRanker(bert).eval()


class EarlScorer:
    """One query against candidates of an S1 or S2 store with `QueryScorer`'s calls, as ``earl.evaluate`` does, the
    rows read into a preallocated tensor; ``parts.ms`` holds each part's milliseconds (`PARTS`)."""

    def __init__(self, model, store, n: int, batch_size: int):
        import torch

        from earl.query_scorer import QueryScorer

        self.batch_size = batch_size
        self.scoring = QueryScorer(model, None, batch_size=batch_size, store=store)
        self.read = StoreReads(store, batch_size, n)  # ids -> their (len(ids), n, width) fp32 rows
        self.doc_mask = torch.ones(batch_size, n, dtype=torch.bool)
        self.parts = PartTimes(PARTS)

    def judge_batch(self, query, rows):
        """Scores of one batch of candidates from their rows for `query` (``encode_query``'s), both parts timed."""
        with self.parts("keys_values_ms"):
            keys_values, doc_mask = self.scoring.stored_rows(rows, self.doc_mask[: len(rows)])
        with self.parts("judge_ms"):
            return self.scoring.score(query, keys_values, doc_mask)

    def __call__(self, tokens, mask, ids: list[str]):
        """Scores (len(ids),) of the candidates `ids` for the query `tokens` (1, q) with `mask`."""
        import torch

        self.parts = PartTimes(PARTS)
        with self.parts("query_ms"):
            query = self.scoring.encode_query(tokens, mask)  # (1, q, h) and its mask: once per query
        scores = torch.empty(len(ids))
        for first in range(0, len(ids), self.batch_size):
            with self.parts("read_ms"):
                rows = self.read(ids[first : first + self.batch_size])
            scores[first : first + len(rows)] = self.judge_batch(query, rows)
        return scores


def earl_flops(scorer: EarlScorer, tokens, mask, ids: list[str], candidates: int) -> int:
    """FLOPs of scoring `candidates` candidates as `scorer` does, from counts on 1 and 2 candidates."""
    query = scorer.scoring.encode_query(tokens, mask)
    query_flops = count_flops(lambda: scorer.scoring.encode_query(tokens, mask))
    one, two = (count_flops(lambda k=k: scorer.judge_batch(query, scorer.read(ids[:k]))) for k in (1, 2))
    return query_flops + math.ceil(candidates / scorer.batch_size) * (2 * one - two) + candidates * (two - one)


def measure_ranker(ranker, n: int, args, timed: bool) -> dict:
    """The BERT ranker's FLOPs on N pairs and, if `timed`, its time on min(--ranker_candidates, N), scaled to N."""
    import torch

    from earl.store import document_words

    measured = min(args.ranker_candidates, args.candidates)
    words = document_words(n, measured, args.seed)[:, : ranker_words(n)]
    pairs = bert_pairs(bert_query(QUERY_LENGTH, args.seed)[0], words)
    assert pairs["pair_tokens"].shape[1] == ranker_tokens(n) <= BERT_POSITIONS
    batches = [{k: v[i : i + args.batch_size] for k, v in pairs.items()} for i in range(0, measured, args.batch_size)]
    with torch.inference_mode():
        counts = {"flops": count_flops(lambda: ranker({k: v[:1] for k, v in pairs.items()})) * args.candidates,
                  "batch_size": min(args.batch_size, measured)}
        if not timed:
            return counts
        ranker(batches[0])  # warm-up
        ms, cpu_ms = wall_and_cpu_ms(lambda: torch.cat([ranker(batch) for batch in batches]), args.repeats)
    scale = args.candidates / measured
    return {"ms": ms * scale, "cpu_ms": cpu_ms * scale, "measured_candidates": measured, **counts}


def measure_earl(model, store, n: int, args) -> dict:
    """EARL S1 or S2 on N candidates drawn afresh for each query, cold (the store dropped from the page cache after a
    warm-up), then warm: the median query's times and parts."""
    import torch

    tokens, mask = bert_query(QUERY_LENGTH, args.seed)
    scorer = EarlScorer(model, store, n, min(earl_batch_size(args), args.candidates))

    def query(candidates: list[str]) -> dict:  # its wall and CPU milliseconds and parts
        wall, cpu = time.perf_counter(), time.process_time()
        scorer(tokens, mask, candidates)
        return {"ms": (time.perf_counter() - wall) * 1000, "cpu_ms": (time.process_time() - cpu) * 1000,
                **scorer.parts.ms}

    def warm_up(spare: list[str]) -> None:  # the shards mapped, the compute run once on zero rows, no row read
        scorer.judge_batch(scorer.scoring.encode_query(tokens, mask), scorer.read.map_shards(spare))

    with torch.inference_mode():
        records, warm, measured = cold_then_warm(store, args.candidates, args.repeats, args.seed, warm_up, query)
        first = candidate_ids(draw_candidates(len(store), args.candidates, args.seed, 0))  # the first query's
        flops = earl_flops(scorer, tokens, mask, first, args.candidates)
    median, warm_median = median_query(records), median_query(warm)
    return {**median, "cpu_ms": statistics.median(r["cpu_ms"] for r in records),
            "compute_ms": median["ms"] - median["read_ms"], "warm_ms": warm_median["ms"],
            "warm_read_ms": warm_median["read_ms"], "warm_compute_ms": warm_median["ms"] - warm_median["read_ms"],
            "measured_candidates": args.candidates, "flops": flops, **measured,
            "store_gb": store.manifest["bytes"] / 1e9, "store_bytes_per_document": store.bytes_per_document,
            "batch_size": scorer.batch_size}


def make_row(impl: str, size_name: str, n: int, result: dict, ranker: dict, args) -> dict:
    """One output row: the measurement, its ratios to the BERT ranker's (`ranker`) and Table 1's, the setting."""
    size, N, ms, flops = SIZES[size_name], args.candidates, result["ms"], result["flops"]
    earl, s1 = impl != "bert_ranker", impl == "earl_s1"
    ranker_ms, ranker_cpu_ms = ranker.get("ms"), ranker.get("cpu_ms")
    compute_ms = result.get("compute_ms", ms)  # the BERT ranker's time is all compute
    macs, table1 = ({i: analytic_cost(size, i, n, N, c) for i in ("bert_ranker", impl)} for c in (None, TABLE1))
    return {"bench": "earl_speed", "impl": impl, "size": size_name, "n": n, "pass": "infer", "ms": round(ms, 3),
            "read_ms": rounded(result.get("read_ms"), 3), "compute_ms": round(compute_ms, 3),
            "warm_ms": rounded(result.get("warm_ms"), 3), "warm_read_ms": rounded(result.get("warm_read_ms"), 3),
            "warm_compute_ms": rounded(result.get("warm_compute_ms"), 3),
            "candidates": N, "measured_candidates": result["measured_candidates"],
            "extrapolated": result["measured_candidates"] < N, "speedup": rounded(ranker_ms and ranker_ms / ms, 2),
            "compute_speedup": rounded(ranker_ms and ranker_ms / compute_ms, 2),
            "warm_speedup": rounded(ranker_ms and result.get("warm_ms") and ranker_ms / result["warm_ms"], 2),
            "cpu_ms": round(result["cpu_ms"], 3),
            "cpu_speedup": rounded(ranker_cpu_ms and ranker_cpu_ms / result["cpu_ms"], 2),
            "analytic_ratio": round(macs["bert_ranker"] / macs[impl], 2),
            "table1_ratio": round(table1["bert_ranker"] / table1[impl], 2),
            "flop_ratio": round(ranker["flops"] / flops, 2),
            "affordable_candidates": math.floor(N * ms / ranker_ms) if ranker_ms and earl else None,
            "query_ms": rounded(result.get("query_ms"), 3),
            "keys_values_ms": rounded(result.get("keys_values_ms"), 3) if s1 else None,
            "judge_ms": rounded(result.get("judge_ms"), 3), "flops": flops,
            "analytic_macs": round(macs[impl]),
            "gflops_per_s": round(flops / ms / 1e6, 2), "compute_gflops_per_s": round(flops / compute_ms / 1e6, 2),
            "store_dtype": args.dtype if earl else None,
            "store_bytes_per_document": result.get("store_bytes_per_document"),
            "store_documents": result.get("store_documents"), "store_gb": rounded(result.get("store_gb"), 3),
            "shard_size": SHARD_SIZE if earl else None, "candidate_shards": result.get("candidate_shards"),
            "store_cached": rounded(result.get("store_cached"), 4), "documents": args.documents if earl else None,
            "batch_size": result["batch_size"], "query_length": QUERY_LENGTH, "ranker_tokens": ranker_tokens(n),
            **size.options(), "judge_blocks": size.blocks, "query_layers": size.query_layers,
            "repeats": args.repeats, **machine()}


def plot(rows: list[dict], path: Path, overwrite: bool) -> None:
    """Seconds per query against n, one panel per size, one line per implementation."""
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
        "python -m earl.benchmark", __doc__.split("\n\n")[0], results="earl",
        writes="speed.csv, speed.jsonl and speed.png", repeats=3, repeats_help="timed queries (the median is reported)",
        devices=False, seed="seeds the weights, the token ids, the noise and the candidates' draws")
    add = parser.add_argument
    add("--size", nargs="+", default=["base"], choices=tuple(SIZES), help="model sizes, each measured in turn: base = "
        "BERT-base with K=2, l=10 (the paper's); small = L=4, h=256, 4 heads, FFN 1024, K=2, l=2")
    add("--lengths", type=positive_int, nargs="+", default=[128, 256, 512], metavar="N",
        help=f"document lengths in tokens ([CLS] included), each from 2 to {BERT_POSITIONS} (BERT's positions; the "
        f"ranker's pair holds at most {RANKER_WORDS} of the document's words)")
    add("--impls", nargs="+", default=list(IMPLS), choices=IMPLS, metavar="IMPL",
        help=f"implementations, of {', '.join(IMPLS)} (the speed-ups need bert_ranker)")
    add("--candidates", type=positive_int, default=1000, help="candidates per query, N")
    add("--ranker_candidates", type=positive_int, default=32, help="candidates the BERT ranker is timed on, in "
        "batches of --batch_size (its time scaled to N)")
    add("--batch_size", type=positive_int, default=BATCH_SIZE, help="candidates per batch for both: the BERT "
        "ranker's pairs per forward pass and EARL's candidates per judge call, by default earl.evaluate's default "
        "--batch_size, so that the benchmark times a user's setting; also T_doc's documents per pass when "
        "--documents encoded")
    add("--earl_batch_size", type=positive_int, default=None, help="EARL's candidates per judge call alone "
        "(default: --batch_size)")
    add("--dtype", choices=DTYPES, default="fp16", help="the stores' rows (fp16: half fp32's disk and bytes read, "
        "converted to fp32 once read, in read_ms; int8: a scale and a byte a column, dequantised into fp32 as read, "
        "in read_ms)")
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
    if max(args.lengths) > BERT_POSITIONS:
        usage_error(f"argument --lengths: each must be at most {BERT_POSITIONS} (BERT's positions), got "
                    f"{max(args.lengths)}")
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
            model, ranker = build_models(size, args.seed)
            weights = f"random weights, seed {args.seed}, size {size_name} ({size.describe()})"
            for n in args.lengths:
                bert = measure_ranker(ranker, n, args, timed="bert_ranker" in args.impls)
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
                                              shard_size=SHARD_SIZE, batch_size=args.batch_size)[strategy]
                        result = measure_earl(model, store, n, args)
                        del store
                    rows.append(emit(make_row(impl, size_name, n, result, bert, args)))
        return session.finish(rows, plot=plot, table=TABLE)


if __name__ == "__main__":
    sys.exit(main())
