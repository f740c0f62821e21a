"""``python -m earl.benchmark``: milliseconds to rank one query's N candidates with the BERT ranker, EARL S1 and EARL S2
(Gao, Dai, Callan 2020, Sec. 5.2, Table 3), beside Table 1's cost (`earl.costs`) and counted FLOPs.

Timed per query of 16 tokens (Sec. 5.2), random weights (timing does not depend on them), inference mode:
``bert_ranker``, `BertRanker` over ``[CLS] query [SEP] document [SEP]`` in batches of ``--batch_size``, timed on
``--ranker_candidates`` candidates and scaled linearly to N (each is the same work); ``earl_s1``, T_qry once, then per
batch of ``--earl_batch_size`` candidates their rows of D copied from a memory-mapped store
(`common.stores.representations`, read once untimed: the page cache holds it) into a preallocated tensor, their keys
and values (the n^2 d term S2 saves; ``--keys_values fused`` stacks the 2K projections into one product, to the same
values) and `EARL.judge`; ``earl_s2``, the same from a store of D' (Eq. 25). ``ms`` is the median wall clock of
``--repeats`` queries after a warm-up batch, ``cpu_ms`` their process CPU time (with ``--threads 1`` the steadier
measure on a shared machine), with EARL's parts (``query_ms``, ``read_ms``, ``keys_values_ms``, ``judge_ms``);
``flops`` are FlopCounterMode's counts of the very calls timed, scaled to N; ``analytic_ratio`` and ``table1_ratio``
are Table 1's ratio counted in multiply-adds and with every constant 1.
"""

from __future__ import annotations

import math
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from common.benchmarking import (
    BertSize, Line, Panel, Session, benchmark_parser, bert_pairs, count_flops, describe_machine, draw, machine,
    output_paths, parse, rounded, text_table, wall_and_cpu_ms,
)
from common.refusals import output_folder, positive_int, usage_error
from earl.costs import TABLE1, Constants, analytic_cost, counted_constants

IMPLS = ("bert_ranker", "earl_s1", "earl_s2")
STRATEGY = {"earl_s1": "s1", "earl_s2": "s2"}
RESULTS = Path(__file__).resolve().parents[1] / "results" / "earl"
QUERY_LENGTH = 16  # Sec. 5.2: "we fixed query length at 16"
VOCAB_SIZE, PAD, CLS, SEP, FIRST_WORD = 30522, 0, 101, 102, 1000  # bert-base-uncased's; random words from FIRST_WORD
DTYPES = {"fp32": "float32", "fp16": "float16"}


@dataclass(frozen=True)
class Size(BertSize):
    """BERT's size and EARL's: K judge blocks, l query layers."""

    blocks: int
    query_layers: int

    def describe(self) -> str:
        return f"{super().describe()}; EARL l={self.query_layers}, K={self.blocks}"


SIZES = {"base": Size(layers=12, hidden=768, heads=12, intermediate=3072, blocks=2, query_layers=10),  # the paper's
         "small": Size(layers=4, hidden=256, heads=4, intermediate=1024, blocks=2, query_layers=2)}  # head width 64


def size_cost(impl: str, size: Size, n: int, documents: int, constants: Constants | None = None) -> float:
    """`earl.costs.analytic_cost` at `size` (query length 16, document length n), in multiply-adds by default."""
    return analytic_cost(impl, n=size.hidden, q=QUERY_LENGTH, d=n, documents=documents, layers=size.layers,
                         query_layers=size.query_layers, blocks=size.blocks,
                         constants=constants or counted_constants(size.hidden, size.intermediate))


def build_models(size: Size, max_length: int, seed: int):
    """EARL and the BERT ranker of `size`, random weights from `seed`, in eval mode; the ranker's BERT is EARL's
    T_doc (T_qry and the judge blocks are built from it, Sec. 3.4)."""
    import torch
    from transformers import BertModel

    from common.encoders.bert_rankers import BertRanker
    from common.encoders.pretrained import bert_config
    from earl.model import build_earl

    torch.manual_seed(seed)
    bert = BertModel(bert_config(vocab_size=VOCAB_SIZE, pad_token_id=PAD, dropout=0.1, max_length=max_length,
                                 **size.options()), add_pooling_layer=False)
    return build_earl(bert, num_blocks=size.blocks, query_layers=size.query_layers).eval(), BertRanker(bert).eval()


def query_tokens(seed: int):
    """The query, (1, 16) ids ``[CLS] 14 words [SEP]``, and its mask."""
    import torch

    words = torch.randint(FIRST_WORD, VOCAB_SIZE, (1, QUERY_LENGTH - 2), generator=torch.Generator().manual_seed(seed))
    tokens = torch.cat([torch.tensor([[CLS]]), words, torch.tensor([[SEP]])], dim=1)
    return tokens, torch.ones_like(tokens)


def document_words(n: int, count: int, seed: int):
    """`count` documents' n - 1 random words each, (count, n - 1), the same for every implementation."""
    import torch

    generator = torch.Generator().manual_seed(seed * 1_000_003 + n)
    return torch.randint(FIRST_WORD, VOCAB_SIZE, (count, n - 1), generator=generator)


def document_tokens(words):
    """EARL's documents: ``[CLS]`` and the words, n tokens each."""
    import torch

    return torch.cat([torch.full((len(words), 1), CLS), words], dim=1)


def doc_ids(count: int) -> list[str]:
    return [f"d{i}" for i in range(count)]


def build_stores(root: Path, model, *, size_name: str, size: Size, impls: list[str], n: int, count: int, dtype: str,
                 documents: str, seed: int, shard_size: int, batch_size: int) -> dict:
    """The S1 and/or S2 stores (`impls`) of `count` documents of n tokens under `root`, from one pass over D (T_doc on
    random words, or with `documents` ``random`` seeded noise of D's shape). A finished store of the same identity
    is opened, not rebuilt; an unfinished one is resumed."""
    import torch

    from common.stores.representations import MANIFEST, RepresentationStore, StoreWriter

    stores, writers = {}, {}
    for impl in impls:
        folder = root / f"{size_name}_n{n}_{STRATEGY[impl]}_{dtype}_{documents}_{count}"
        identity = {"checkpoint": f"random weights, seed {seed}, size {size_name} ({size.describe()})",
                    "strategy": STRATEGY[impl], "length": n, "documents": documents, "count": count}
        if (folder / MANIFEST).exists():
            stores[impl] = RepresentationStore.open(folder, expect=identity)
            continue
        writers[impl] = StoreWriter(folder, doc_ids=doc_ids(count), dtype=DTYPES[dtype], shard_size=shard_size,
                                    width=size.hidden * (1 if impl == "earl_s1" else 2 * size.blocks),
                                    identity=identity, extra={"judge_blocks": size.blocks, "heads": size.heads},
                                    resume=True)  # fmt: skip
    words = document_words(n, count, seed) if writers and documents == "encoded" else None
    keys_values = fused_keys_values(model)  # D' as EARL.document_keys_values computes it, in one product
    with torch.inference_mode():
        for shard in sorted(set().union(*(set(w.pending()) for w in writers.values()))):
            first, last = shard * shard_size, min(shard * shard_size + shard_size, count)
            if words is None:
                generator = torch.Generator().manual_seed(seed * 1_000_003 + n * 7919 + shard)
                hidden = torch.randn(last - first, n, size.hidden, generator=generator)
            else:
                hidden = torch.cat([model.encode_documents(part, torch.ones_like(part))
                                    for part in document_tokens(words[first:last]).split(batch_size)])
            for impl, writer in writers.items():
                if shard in writer.pending():
                    writer.write_shard(shard, list(hidden if impl == "earl_s1" else keys_values(hidden)))
    return {impl: stores[impl] if impl in stores else writers[impl].finish() for impl in impls}


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
    ``parts`` holds its milliseconds of query encoding, reads, keys and values, and judge."""

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
        self.parts: dict[str, float] = {}

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
        start = time.perf_counter()
        keys_values = self.keys_values(rows) if self.impl == "earl_s1" else rows
        middle = time.perf_counter()
        count = len(rows)
        scores = self.model.judge(queries, query_mask, keys_values, self.doc_mask[:count], self.query_index[:count])
        self.parts["keys_values_ms"] = self.parts.get("keys_values_ms", 0.0) + (middle - start) * 1000
        self.parts["judge_ms"] = self.parts.get("judge_ms", 0.0) + (time.perf_counter() - middle) * 1000
        return scores

    def __call__(self, tokens, mask, ids: list[str]):
        """Scores (len(ids),) of the candidates `ids` for the query `tokens` (1, q) with `mask`."""
        import torch

        self.parts = dict.fromkeys(("query_ms", "read_ms", "keys_values_ms", "judge_ms"), 0.0)
        start = time.perf_counter()
        queries, query_mask = self.model.encode_queries(tokens, mask), mask.bool()  # (1, q, h): once per query
        self.parts["query_ms"] = (time.perf_counter() - start) * 1000
        scores = torch.empty(len(ids))
        for first in range(0, len(ids), self.batch_size):
            before = time.perf_counter()
            rows = self.read(ids[first : first + self.batch_size])
            self.parts["read_ms"] += (time.perf_counter() - before) * 1000
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


def measure_ranker(ranker, n: int, args) -> dict:
    """Time the BERT ranker on min(--ranker_candidates, N) pairs, scaled to N."""
    import torch

    measured = min(args.ranker_candidates, args.candidates)
    pairs = bert_pairs(query_tokens(args.seed)[0], document_words(n, measured, args.seed), SEP)
    batches = [{k: v[i : i + args.batch_size] for k, v in pairs.items()} for i in range(0, measured, args.batch_size)]
    with torch.inference_mode():
        ranker(batches[0])  # warm-up
        ms, cpu_ms = wall_and_cpu_ms(lambda: torch.cat([ranker(batch) for batch in batches]), args.repeats)
    scale = args.candidates / measured
    return {"ms": ms * scale, "cpu_ms": cpu_ms * scale, "measured_candidates": measured}


def measure_earl(model, store, impl: str, n: int, args) -> dict:
    """Time EARL S1 or S2 (`impl`) on N candidates from `store`, after one untimed read of every candidate and one
    untimed batch; its parts are the medians over the timed queries, its FLOPs `earl_flops`."""
    import torch

    ids, (tokens, mask), parts = doc_ids(args.candidates), query_tokens(args.seed), []
    scorer = EarlScorer(model, store, impl, n, min(args.earl_batch_size, args.candidates), args.keys_values)

    def step():
        scorer(tokens, mask, ids)
        parts.append(dict(scorer.parts))

    with torch.inference_mode():
        scorer.warm(ids)
        scorer(tokens, mask, ids[: scorer.batch_size])  # warm-up: one batch
        ms, cpu_ms = wall_and_cpu_ms(step, args.repeats)
        flops = earl_flops(scorer, tokens, mask, ids, args.candidates)
    return {"ms": ms, "cpu_ms": cpu_ms, "measured_candidates": args.candidates, "flops": flops,
            **{key: statistics.median(p[key] for p in parts) for key in parts[0]},
            "store_bytes_per_document": store.bytes_per_document}


def make_row(impl: str, size_name: str, n: int, result: dict, ranker: dict | None, ranker_flops: int, args) -> dict:
    """One output row: the measurement, its ratios to the BERT ranker's (`ranker`, None when not timed; its FLOPs
    `ranker_flops`, counted whether timed or not), the setting."""
    size, N, ms, flops = SIZES[size_name], args.candidates, result["ms"], result["flops"]
    macs, earl = size_cost(impl, size, n, N), impl != "bert_ranker"
    ranker_ms, ranker_cpu_ms = (ranker["ms"], ranker["cpu_ms"]) if ranker else (None, None)
    return {"bench": "earl_speed", "impl": impl, "size": size_name, "n": n, "pass": "infer", "ms": round(ms, 3),
            "candidates": N, "measured_candidates": result["measured_candidates"],
            "extrapolated": result["measured_candidates"] < N, "speedup": rounded(ranker_ms and ranker_ms / ms, 2),
            "cpu_ms": round(result["cpu_ms"], 3),
            "cpu_speedup": rounded(ranker_cpu_ms and ranker_cpu_ms / result["cpu_ms"], 2),
            "analytic_ratio": round(size_cost("bert_ranker", size, n, N) / macs, 2),
            "table1_ratio": round(size_cost("bert_ranker", size, n, N, TABLE1) / size_cost(impl, size, n, N, TABLE1),
                                  2),
            "flop_ratio": round(ranker_flops / flops, 2),
            "affordable_candidates": math.floor(N * ms / ranker_ms) if ranker_ms and earl else None,
            "query_ms": rounded(result.get("query_ms"), 3), "read_ms": rounded(result.get("read_ms"), 3),
            "keys_values_ms": rounded(result.get("keys_values_ms"), 3) if impl == "earl_s1" else None,
            "keys_values": args.keys_values if impl == "earl_s1" else None,
            "judge_ms": rounded(result.get("judge_ms"), 3),
            "flops": flops, "analytic_macs": round(macs), "gflops_per_s": round(flops / ms / 1e6, 2),
            "compute_gflops_per_s": round(flops / (ms - result.get("read_ms", 0.0)) / 1e6, 2),
            "store_dtype": args.dtype if earl else None,
            "store_bytes_per_document": result.get("store_bytes_per_document"),
            "documents": args.documents if earl else None,
            "batch_size": min(args.earl_batch_size, N) if earl else args.batch_size, "query_length": QUERY_LENGTH,
            "num_layers": size.layers, "hidden_size": size.hidden, "num_heads": size.heads,
            "intermediate_size": size.intermediate, "judge_blocks": size.blocks, "query_layers": size.query_layers,
            "repeats": args.repeats, **machine()}


def run_size(size_name: str, args, store_root: Path, emit) -> list[dict]:
    """Every length and implementation of one size; `emit` is given each row as it is measured."""
    import torch

    size = SIZES[size_name]
    # q + d positions: 528 at d = 512, past BERT's 512 (random weights: nothing is lost)
    model, ranker = build_models(size, QUERY_LENGTH + max(args.lengths), args.seed)
    rows = []
    for n in args.lengths:
        one = bert_pairs(query_tokens(args.seed)[0], document_words(n, 1, args.seed), SEP)
        with torch.inference_mode():  # the ranker's FLOPs are every row's ratio; its time only where it is measured
            ranker_flops = count_flops(lambda: ranker(one)) * args.candidates
        timed = measure_ranker(ranker, n, args) if "bert_ranker" in args.impls else None
        if timed:
            rows.append(emit(make_row("bert_ranker", size_name, n, {**timed, "flops": ranker_flops}, timed,
                                      ranker_flops, args)))
        wanted = [impl for impl in STRATEGY if impl in args.impls]
        stores = wanted and build_stores(store_root, model, size_name=size_name, size=size, impls=wanted, n=n,
                                         count=args.candidates, dtype=args.dtype, documents=args.documents,
                                         seed=args.seed, shard_size=min(args.earl_batch_size, args.candidates),
                                         batch_size=args.batch_size)  # fmt: skip
        for impl in wanted:
            result = measure_earl(model, stores[impl], impl, n, args)
            rows.append(emit(make_row(impl, size_name, n, result, timed, ranker_flops, args)))
        if stores and args.store_dir is None:  # a temporary store: free its disk and page cache before the next n
            for store in stores.values():
                shutil.rmtree(store.folder, ignore_errors=True)
    return rows


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


def table(rows: list[dict]) -> str:
    """The measurements as a text table (ratios: the BERT ranker's over the row's)."""
    return text_table(rows, [(key, key, spec) for key, spec in (
        ("size", ""), ("impl", ""), ("n", "d"), ("ms", ".1f"), ("read_ms", ".1f"), ("speedup", ".1f"),
        ("cpu_ms", ".1f"), ("cpu_speedup", ".1f"), ("analytic_ratio", ".1f"), ("table1_ratio", ".1f"),
        ("flop_ratio", ".1f"), ("gflops_per_s", ".1f"), ("measured_candidates", "d"), ("load_1min", ".1f"))])


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
    add("--dtype", choices=tuple(DTYPES), default="fp32", help="the stores' rows (fp16: converted to fp32 once read)")
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

        def emit(row: dict) -> dict:
            session.emit(row, f"{row['size']} {row['impl']:>11} n={row['n']}: {row['ms']:.1f} ms/query"
                         + ("" if row["speedup"] is None else f", {row['speedup']:.1f}x"))
            return row

        with tempfile.TemporaryDirectory(prefix="earl_stores_") as temporary:
            rows = [row for size_name in args.size
                    for row in run_size(size_name, args, args.store_dir or Path(temporary), emit)]
        return session.finish(rows, plot=plot, table=table)


if __name__ == "__main__":
    sys.exit(main())
