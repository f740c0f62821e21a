"""``python -m earl.benchmark``: milliseconds to rank one query's N candidates with the BERT ranker, EARL S1 and EARL S2
(Gao, Dai, Callan 2020, Sec. 5.2, Table 3), beside Table 1's cost (`earl.costs.Size`) and counted FLOPs.

Timed per query of 16 tokens (Sec. 5.2), random weights (timing does not depend on them), inference mode:
``bert_ranker``, `BertRanker` over ``[CLS] query [SEP] document [SEP]`` in batches of ``--batch_size``, timed on
``--ranker_candidates`` candidates and scaled linearly to N (each is the same work); ``earl_s1``, T_qry once, then per
batch of ``--earl_batch_size`` candidates their rows of D copied from a memory-mapped store (`earl.store.random_stores`,
read once untimed: the page cache holds it) into a preallocated tensor, their keys and values (the n^2 d term S2 saves;
``--keys_values fused`` stacks the 2K projections into one product, to the same values) and `EARL.judge`; ``earl_s2``,
the same from a store of D' (Eq. 25). ``ms`` is the median wall clock of ``--repeats`` queries after a warm-up batch,
``cpu_ms`` their process CPU time (with ``--threads 1`` the steadier measure on a shared machine), with EARL's parts
(``query_ms``, ``read_ms``, ``keys_values_ms``, ``judge_ms``); ``flops`` are FlopCounterMode's counts of the very calls
timed, scaled to N; ``analytic_ratio`` and ``table1_ratio`` are Table 1's ratio in multiply-adds and with every
constant 1.
"""

from __future__ import annotations

import math
import statistics
import sys
import tempfile
from pathlib import Path

from common.benchmarking import (
    Line, Panel, PartTimes, Session, benchmark_parser, bert_pairs, bert_query, count_flops, describe_machine, draw,
    machine, output_paths, parse, rounded, wall_and_cpu_ms,
)
from common.refusals import output_folder, positive_int, usage_error
from earl.costs import TABLE1, Size

IMPLS = ("bert_ranker", "earl_s1", "earl_s2")
STRATEGY = {"earl_s1": "s1", "earl_s2": "s2"}
RESULTS = Path(__file__).resolve().parents[1] / "results" / "earl"
QUERY_LENGTH = 16  # Sec. 5.2: "we fixed query length at 16"
DTYPES = ("fp32", "fp16")  # earl.store.ROW_TYPES, not imported here: earl.store loads torch, and --help must not
PARTS = ("query_ms", "read_ms", "keys_values_ms", "judge_ms")  # EARL's, timed by `EarlScorer`
SIZES = {"base": Size(layers=12, hidden=768, heads=12, intermediate=3072, blocks=2, query_layers=10),  # the paper's
         "small": Size(layers=4, hidden=256, heads=4, intermediate=1024, blocks=2, query_layers=2)}  # head width 64
TABLE = (("size", ""), ("impl", ""), ("n", "d"), ("ms", ".1f"), ("read_ms", ".1f"), ("speedup", ".1f"),
         ("cpu_ms", ".1f"), ("cpu_speedup", ".1f"), ("analytic_ratio", ".1f"), ("table1_ratio", ".1f"),
         ("flop_ratio", ".1f"), ("gflops_per_s", ".1f"), ("measured_candidates", "d"), ("load_1min", ".1f"))


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
    candidates (each exactly `n` rows) their rows read into a preallocated tensor, keys and values (S1 only:
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
        self.rows = torch.empty(batch_size, n, store.width, dtype=stored)
        self.rows_numpy = self.rows.numpy()  # the same memory: numpy copies the memory map's rows into it
        self.compute = self.rows if stored == torch.float32 else torch.empty(batch_size, n, store.width)
        self.doc_mask = torch.ones(batch_size, n, dtype=torch.bool)
        self.query_index = torch.zeros(batch_size, dtype=torch.long)
        self.parts = PartTimes(PARTS)

    def read(self, ids: list[str]):
        """The candidates' rows as a (len(ids), n, width) fp32 tensor (the preallocated buffer's first rows)."""
        import numpy as np

        for i, doc_id in enumerate(ids):
            np.copyto(self.rows_numpy[i], self.store.get(doc_id))
        if self.compute is not self.rows:
            self.compute[: len(ids)].copy_(self.rows[: len(ids)])
        return self.compute[: len(ids)]

    def warm(self, ids: list[str]) -> None:
        """Read every candidate's rows once (untimed): their pages are then in the page cache."""
        for start in range(0, len(ids), self.batch_size):
            self.read(ids[start : start + self.batch_size])

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
    """Time EARL S1 or S2 (`impl`) on N candidates from `store`, after one untimed read of every candidate and one
    untimed batch; its parts are the medians over the timed queries, its FLOPs `earl_flops`."""
    import torch

    ids, (tokens, mask), parts = store.doc_ids, bert_query(QUERY_LENGTH, args.seed), []
    scorer = EarlScorer(model, store, impl, n, min(args.earl_batch_size, args.candidates), args.keys_values)

    def step():
        scorer(tokens, mask, ids)
        parts.append(dict(scorer.parts.ms))

    with torch.inference_mode():
        scorer.warm(ids)
        scorer(tokens, mask, ids[: scorer.batch_size])  # warm-up: one batch
        ms, cpu_ms = wall_and_cpu_ms(step, args.repeats)
        flops = earl_flops(scorer, tokens, mask, ids, args.candidates)
    return {"ms": ms, "cpu_ms": cpu_ms, "measured_candidates": args.candidates, "flops": flops,
            **{key: statistics.median(p[key] for p in parts) for key in parts[0]},
            "store_bytes_per_document": store.bytes_per_document}


def make_row(impl: str, size_name: str, n: int, result: dict, ranker: dict, args) -> dict:
    """One output row: the measurement, its ratios to the BERT ranker's (`ranker`: its FLOPs, and its time where it was
    timed) and Table 1's (`earl.costs.Size.ratio`), the setting."""
    size, N, ms, flops = SIZES[size_name], args.candidates, result["ms"], result["flops"]
    earl, s1 = impl != "bert_ranker", impl == "earl_s1"
    ranker_ms, ranker_cpu_ms = ranker.get("ms"), ranker.get("cpu_ms")
    return {"bench": "earl_speed", "impl": impl, "size": size_name, "n": n, "pass": "infer", "ms": round(ms, 3),
            "candidates": N, "measured_candidates": result["measured_candidates"],
            "extrapolated": result["measured_candidates"] < N, "speedup": rounded(ranker_ms and ranker_ms / ms, 2),
            "cpu_ms": round(result["cpu_ms"], 3),
            "cpu_speedup": rounded(ranker_cpu_ms and ranker_cpu_ms / result["cpu_ms"], 2),
            "analytic_ratio": round(size.ratio(impl, QUERY_LENGTH, n, N), 2),
            "table1_ratio": round(size.ratio(impl, QUERY_LENGTH, n, N, TABLE1), 2),
            "flop_ratio": round(ranker["flops"] / flops, 2),
            "affordable_candidates": math.floor(N * ms / ranker_ms) if ranker_ms and earl else None,
            "query_ms": rounded(result.get("query_ms"), 3), "read_ms": rounded(result.get("read_ms"), 3),
            "keys_values_ms": rounded(result.get("keys_values_ms"), 3) if s1 else None,
            "keys_values": args.keys_values if s1 else None, "judge_ms": rounded(result.get("judge_ms"), 3),
            "flops": flops, "analytic_macs": round(size.cost(impl, QUERY_LENGTH, n, N)),
            "gflops_per_s": round(flops / ms / 1e6, 2),
            "compute_gflops_per_s": round(flops / (ms - result.get("read_ms", 0.0)) / 1e6, 2),
            "store_dtype": args.dtype if earl else None,
            "store_bytes_per_document": result.get("store_bytes_per_document"),
            "documents": args.documents if earl else None,
            "batch_size": min(args.earl_batch_size, N) if earl else args.batch_size, "query_length": QUERY_LENGTH,
            **size.options(), "judge_blocks": size.blocks, "query_layers": size.query_layers,
            "repeats": args.repeats, **machine()}


def plot(rows: list[dict], path: Path, overwrite: bool) -> None:
    """Seconds per query against n, log scale, one panel per size, one line per implementation (dashed where
    extrapolated), EARL's points labelled with their speed-up."""
    panels = []
    for size_name in dict.fromkeys(r["size"] for r in rows):
        first, lines = next(r for r in rows if r["size"] == size_name), []
        for impl, color in zip(IMPLS, ("C3", "C0", "C2")):
            mine = sorted((r["n"], r) for r in rows if (r["size"], r["impl"]) == (size_name, impl))
            scaled = any(r["extrapolated"] for _, r in mine)
            lines.append(Line(impl + scaled * " (timed on fewer, scaled)", style="o--" if scaled else "o-",
                              color=color, points=[(n, r["ms"] / 1000, impl != "bert_ranker" and r["speedup"] and
                                                    f"{r['speedup']:.0f}x") for n, r in mine]))
        panels.append(Panel(f"{size_name}: {SIZES[size_name].describe()}\nq = {QUERY_LENGTH}, {first['cpu']}, "
                            f"{first['threads']} thread(s)", "document length d (tokens)",
                            f"seconds per query ({first['candidates']} candidates)", lines, ticks=True))
    draw(panels, path, overwrite=overwrite)


def parse_args(argv: list[str] | None):
    parser = benchmark_parser(
        "python -m earl.benchmark", "EARL Table 3: milliseconds to rank one query (16 tokens) against N candidates "
        "with the BERT ranker, EARL S1 (stores D) and EARL S2 (stores D'), by document length, with the speed-ups "
        "beside Table 1's analytic cost ratio and the counted FLOP ratio.", results=RESULTS,
        writes="speed.csv, speed.jsonl and speed.png", repeats=3, repeats_help="timed queries (the median is reported)",
        devices=False, seed="seeds the weights, the token ids and the noise")
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
    add("--earl_batch_size", type=positive_int, default=100, help="EARL candidates per judge call (and per shard)")
    add("--keys_values", choices=("fused", "model"), default="fused", help="S1's keys and values: one product of "
        "the stacked weights (fused) or EARL.document_keys_values (model: 2K products and a concatenation)")
    add("--dtype", choices=DTYPES, default="fp32", help="the stores' rows (fp16: converted to fp32 once read)")
    add("--documents", choices=("encoded", "random"), default="encoded",
        help="the stores' D: T_doc on random token ids, or seeded noise (no offline encoding, same timing)")
    add("--store_dir", type=output_folder, help="where the stores are built and kept, reused when their identity "
        "matches (default: a temporary folder, each length's stores removed once measured)")
    args = parse(parser, argv)
    if min(args.lengths) < 2:
        usage_error(f"argument --lengths: each must be at least 2 ([CLS] and a word), got {min(args.lengths)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with Session(args, output_paths(args.output_dir, "speed")) as session:
        session.say(f"EARL speed: {', '.join(args.size)}; lengths {args.lengths}; {args.candidates} candidates (BERT "
                    f"ranker timed on {min(args.ranker_candidates, args.candidates)}); {describe_machine()}")
        from earl.store import random_stores

        def emit(row: dict) -> dict:
            return session.emit(row, f"{row['size']} {row['impl']:>11} n={row['n']}: {row['ms']:.1f} ms/query"
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
                # without --store_dir, the stores are temporary: their disk and page cache freed before the next n
                with tempfile.TemporaryDirectory(prefix="earl_stores_") as temporary:
                    stores = random_stores(args.store_dir or Path(temporary), model, name=size_name, checkpoint=weights,
                                           strategies=[STRATEGY[impl] for impl in wanted], n=n, count=args.candidates,
                                           dtype=args.dtype, documents=args.documents, seed=args.seed,
                                           shard_size=min(args.earl_batch_size, args.candidates),
                                           batch_size=args.batch_size, keys_values=fused_keys_values(model))
                    for impl in wanted:
                        result = measure_earl(model, stores[STRATEGY[impl]], impl, n, args)
                        rows.append(emit(make_row(impl, size_name, n, result, bert, args)))
        return session.finish(rows, plot=plot, table=TABLE)


if __name__ == "__main__":
    sys.exit(main())
