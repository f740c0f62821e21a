"""``python -m mva.benchmark``: milliseconds per query over N candidates for DE, MVA1-3 and CA (Zhou and Devlin 2021,
Tables 5-6 count joint compute and storage; timed here), beside `mva.costs`' MACs and bytes per document.

``de``: the query's h-vector against N stored ones; ``mva1``-``mva3``: `MultiVectorAttention.score_candidates`
over stored [D_K | D_V] rows at Table 5's points; ``ca``: `BertRanker` over 128-token pairs, timed on
``--ca_candidates``, scaled to N. DE's and MVA's rows are read cold from an fp32 store of seeded noise, N candidates
drawn afresh each repeat; ``ms = read_ms + compute_ms`` (the median query). Beside DE's and MVA's compute, the rate of
one plain fp32 matmul of the same FLOPs over the very rows the head reads (`matmul_shape`), timed as the head is (right
after the same rows are copied in, each query), and of a square one of the same FLOPs, in the same run.
Random weights. docs/mva_benchmark.md has the details.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from common.benchmarks.bert_inputs import (
    BERT_CLS, BERT_PAD, BERT_SEP, BERT_VOCAB_SIZE, FIRST_WORD, BertSize, bert_pairs,
)
from common.benchmarks.machine import describe_machine, gpu_description, machine
from common.benchmarks.options import benchmark_parser, parse, resolve_device
from common.benchmarks.plots import Line, Panel, draw
from common.benchmarks.session import Session, output_paths, text_table
from common.benchmarks.store_reads import (
    StoreReads, add_store_options, check_store_options, cold_then_warm, median_query, write_noise,
)
from common.benchmarks.timing import median_ms
from common.refusals import positive_int
from mva.costs import MVA_POINTS, PAIR_TOKENS, QUERY_TIMESTEPS, bert_macs, dual_encoder_macs, mva_macs, mva_storage

IMPLS = ("de", "mva1", "mva2", "mva3", "ca")
LABELS = {"de": "DE", "mva1": "MVA1", "mva2": "MVA2", "mva3": "MVA3", "ca": "CA"}
FLOAT_BYTES = 4  # fp32
SIZES = {"base": BertSize(12, 768, 12, 3072), "small": BertSize(6, 384, 12, 1536)}
SHARD_SIZE = 1000  # documents per shard: the index commands' default (--shard_size)
#: Documents in a store by default: at most 1.8 GB on disk (MVA1's rows) in 25 shards.
STORE_DOCUMENTS = 25_000


class Point(NamedTuple):
    """An MVA operating point (`mva.costs.table5`): q query and d document timesteps, projection p, H heads."""

    query: int
    doc: int
    projection: int
    heads: int


POINTS = {name.lower(): Point(*point) for name, point in MVA_POINTS.items()}


def cost(impl: str, size: BertSize) -> tuple[int, int, str]:
    """MACs per candidate, floats stored per document and the setting of `impl` at `size`, from `mva.costs`."""
    if impl == "de":
        return dual_encoder_macs(size.hidden), size.hidden, f"dot product of h = {size.hidden}"
    if impl == "ca":
        return (bert_macs(PAIR_TOKENS, size.layers, size.hidden, size.intermediate), 0,
                f"BERT ({size.describe()}) over {PAIR_TOKENS} pair tokens")
    q, d, p, heads = POINTS[impl]
    return mva_macs(q, d, p, heads), mva_storage(d, p, heads), f"q = {q}, d = {d}, p = {p}"


def store_shape(impl: str, size: BertSize) -> tuple[int, int]:
    """Rows and columns of one document in `impl`'s store: DE's one h-vector; MVA's d timesteps of [D_K | D_V]."""
    if impl == "de":
        return 1, size.hidden
    point = POINTS[impl]
    return point.doc, 2 * point.heads * point.projection


def noise_store(root: Path, impl: str, rows: int, width: int, documents: int, seed: int):
    """The fp32 store of `documents` documents ``d{i}`` of `rows` x `width` seeded noise under `root` (reopened)."""
    from common.stores.representations import MANIFEST, RepresentationStore, StoreWriter

    folder = root / f"{impl}_{rows}x{width}_{documents}"
    identity = {"checkpoint": f"noise, seed {seed}", "strategy": impl, "rows": rows, "documents": documents}
    if (folder / MANIFEST).exists():
        return RepresentationStore.open(folder, expect=identity)
    writer = StoreWriter(folder, doc_ids=[f"d{i}" for i in range(documents)], width=width, dtype="float32",
                         shard_size=SHARD_SIZE, identity=identity, resume=True)
    write_noise(writer, seed * 1_000_003 + rows, rows)
    return writer.finish()


def mva_head(point: Point, candidates: int, device: str, seed: int):
    """``score(documents)``: `MultiVectorAttention.score_candidates` of one seeded query (Q_K, Q_V (q, H p)) over
    (candidates, d, 2 H p) rows, as `mva.query_scorer.QueryScorer` scores a store's candidates."""
    import torch

    from mva.model import MultiVectorAttention

    torch.manual_seed(seed)
    hp = point.heads * point.projection
    head = MultiVectorAttention(hp, hp, point.projection, point.heads, False).eval().to(device)
    query_keys, query_values = (torch.randn(point.query, hp, device=device) for _ in "kv")
    query_keep = torch.ones(point.query, dtype=torch.bool, device=device)
    doc_keep = torch.ones(candidates, point.doc, dtype=torch.bool, device=device)
    return lambda documents: head.score_candidates(query_keys, query_values, query_keep, documents, doc_keep)


def de_head(hidden: int, device: str, seed: int):
    """``score(documents)``: the query's h-vector (random, seeded) against candidates' (candidates, 1, h) vectors."""
    import torch

    query = torch.randn(hidden, generator=torch.Generator().manual_seed(seed)).to(device)
    return lambda documents: documents.view(len(documents), hidden) @ query


def matmul_shape(impl: str, size: BertSize, candidates: int) -> tuple[int, int, int]:
    """(m, k, n) of the one plain matmul over the rows `impl`'s head reads, of its products' FLOPs: the yardstick of
    its compute. MVA: a (q, 2 H p) matrix against the (2 H p, d C) rows [D_K | D_V]^T, the FLOPs of Q_K D_K^T and
    Q_V D_V^T (the MACs `mva.costs` counts less the q H p dot products with Q_V, and the softmax); DE: (1, h) x (h, C),
    its very product."""
    if impl == "de":
        return 1, size.hidden, candidates
    point = POINTS[impl]
    return point.query, 2 * point.heads * point.projection, point.doc * candidates


def yardstick(shape: tuple[int, int, int], device: str, seed: int):
    """``matmul(documents)``: fp32 ``torch.matmul`` of a seeded (m, k) matrix and the (k, n) transpose of the rows
    read, (C, rows, k) viewed as (n, k): the store's layout as the head takes it."""
    import torch

    m, k, n = shape
    a = torch.randn(m, k, generator=torch.Generator().manual_seed(seed)).to(device)
    return lambda documents: torch.matmul(a, documents.view(n, k).T)


def square_matmul_gflops(shape: tuple[int, int, int], repeats: int, device: str, seed: int) -> float:
    """GFLOP/s of fp32 ``torch.matmul`` of two seeded square matrices of about `shape`'s FLOPs (the side the cube root
    of m k n): the median of `repeats` after a warm-up, in the same process as the head."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    m, k, n = shape
    side = round((m * k * n) ** (1 / 3))
    a, b = (torch.randn(side, side, generator=generator).to(device) for _ in "ab")
    torch.matmul(a, b)  # warm-up
    return 2 * side**3 / median_ms(lambda: torch.matmul(a, b), repeats, device) / 1e6


def time_store_queries(store, score, matmul, args) -> dict:
    """``--repeats`` queries, each reading its own candidates from `store` cold and scoring them, then copying the
    same rows in again and running the yardstick `matmul` on them: the median query's times, the yardstick's median
    (``matmul_ms``), the same reads warm, the shards the candidates fell in and the store's cached fraction."""
    import torch

    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    read = StoreReads(store, args.candidates, store.manifest["rows"] // len(store), args.device)

    def timed(step) -> float:  # milliseconds
        sync()
        start = time.perf_counter()
        step()
        sync()
        return (time.perf_counter() - start) * 1000

    def query(ids: list[str]) -> dict:  # its read and compute milliseconds, and the yardstick's on the same rows
        documents = []
        read_ms = timed(lambda: documents.append(read(ids)))
        compute_ms = timed(lambda: score(documents[0]))
        again = read(ids)  # the rows copied in again: the yardstick starts where the head did
        return {"ms": read_ms + compute_ms, "read_ms": read_ms, "compute_ms": compute_ms,
                "matmul_ms": timed(lambda: matmul(again))}

    def warm_up(spare: list[str]) -> None:  # the shards mapped, the head and the yardstick run once, no row read
        documents = read.map_shards(spare)
        score(documents)
        matmul(documents)

    records, warm, measured = cold_then_warm(store, args.candidates, args.repeats, args.seed, warm_up, query)
    return {**median_query(records), "matmul_ms": statistics.median(r["matmul_ms"] for r in records),
            "warm_read_ms": statistics.median(r["read_ms"] for r in warm), **measured}


def ca_step(size: BertSize, count: int, batch_size: int, device: str, seed: int):
    """CA over `count` pairs of PAIR_TOKENS tokens in batches of `batch_size`, and its warm-up of one batch."""
    import torch

    from common.encoders.bert_rankers import BertRanker
    from common.encoders.pretrained import from_scratch_bert

    bert = from_scratch_bert(seed, vocab_size=BERT_VOCAB_SIZE, pad_token_id=BERT_PAD, dropout=0.1,
                             max_length=max(512, PAIR_TOKENS), **size.options())
    ranker = BertRanker(bert).eval().to(device)
    generator = torch.Generator().manual_seed(seed)
    query = torch.randint(FIRST_WORD, BERT_VOCAB_SIZE, (1, QUERY_TIMESTEPS - 1), generator=generator)
    words = torch.randint(FIRST_WORD, BERT_VOCAB_SIZE, (count, PAIR_TOKENS - QUERY_TIMESTEPS - 2), generator=generator)
    query = torch.cat([torch.tensor([[BERT_CLS]]), query, torch.tensor([[BERT_SEP]])], dim=1)
    pairs = bert_pairs(query, words, BERT_SEP)
    batches = [{k: v[i:i + batch_size].to(device) for k, v in pairs.items()} for i in range(0, count, batch_size)]
    return (lambda: torch.cat([ranker(batch) for batch in batches])), (lambda: ranker(batches[0]))


def measure(size_name: str, args, log) -> list[dict]:
    """Every method at one size, rows in `IMPLS` order with CA's ratios; one store on disk at a time."""
    import torch

    size, n, rows = SIZES[size_name], args.candidates, []
    with torch.inference_mode():
        for impl in IMPLS:
            macs, floats, setting = cost(impl, size)
            point, ca = POINTS.get(impl), impl == "ca"
            timed, repeats = (min(args.ca_candidates, n), args.ca_repeats) if ca else (n, args.repeats)
            if ca:
                step, warm_up = ca_step(size, timed, args.batch_size, args.device, args.seed)
                warm_up()
                timed_ms = median_ms(step, repeats, args.device)
                result = {"ms": timed_ms * n / timed}  # linear in the candidates: each is the same work
            else:
                seed = args.seed
                score = mva_head(point, n, args.device, seed) if point else de_head(size.hidden, args.device, seed)
                log(f"{size_name} {impl:>4}: building a store of {args.store_documents:,} documents "
                    f"({args.store_documents * FLOAT_BYTES * floats / 1e9:.2f} GB)")
                with tempfile.TemporaryDirectory(prefix="mva_store_") as temporary:
                    store = noise_store(args.store_dir or Path(temporary), impl, *store_shape(impl, size),
                                        args.store_documents, args.seed)
                    shape = matmul_shape(impl, size, n)
                    result = time_store_queries(store, score, yardstick(shape, args.device, seed), args)
                    del store
                m, k, columns = shape
                result |= {"matmul_shape": f"{m} x {k} by {k} x {columns}",
                           "matmul_gflops_per_s": 2 * m * k * columns / result["matmul_ms"] / 1e6,
                           "square_matmul_gflops_per_s": square_matmul_gflops(shape, args.repeats, args.device, seed)}
                timed_ms = result["ms"]
            ms, here = result["ms"], machine()
            compute_ms = result.get("compute_ms", ms)  # CA's time is all compute
            rows.append({
                "bench": "mva_speed", "impl": impl, "size": size_name, "candidates": n, "timed_candidates": timed,
                "extrapolated": timed != n, "ms": ms, "read_ms": result.get("read_ms"), "compute_ms": compute_ms,
                "warm_read_ms": result.get("warm_read_ms"), "timed_ms": timed_ms, "macs": macs * n,
                "mflops": macs * n / 1e6, "gflops_per_s": 2 * macs * n / ms / 1e6,
                "compute_gflops_per_s": 2 * macs * n / compute_ms / 1e6,
                **{k: result.get(k) for k in ("matmul_shape", "matmul_gflops_per_s", "square_matmul_gflops_per_s")},
                "compute_matmul_ratio": None if ca else 2 * macs * n / compute_ms / 1e6 / result["matmul_gflops_per_s"],
                "ca_time_ratio": None, "ca_compute_ratio": None, "ca_macs_ratio": None, "storage_floats": floats,
                "bytes_per_document": FLOAT_BYTES * floats, "store_documents": result.get("store_documents"),
                "shard_size": None if ca else SHARD_SIZE, "candidate_shards": result.get("candidate_shards"),
                "store_cached": result.get("store_cached"), "setting": setting,
                "query_timesteps": point.query if point else (QUERY_TIMESTEPS if ca else 1),
                "doc_timesteps": point.doc if point else (None if ca else 1),
                "projection": point and point.projection, "heads": point and point.heads,
                "hidden_size": None if point else size.hidden, "num_layers": size.layers if ca else None,
                "intermediate_size": size.intermediate if ca else None, "pair_tokens": PAIR_TOKENS if ca else None,
                "batch_size": min(args.batch_size, timed) if ca else n, "repeats": repeats, "device": args.device,
                "gpu": gpu_description(args.device), **{k: here[k] for k in ("cpu", "threads", "load_1min")}})
            read = "" if ca else (f" ({result['read_ms']:.3f} reading, {compute_ms:.3f} compute, "
                                  f"{rows[-1]['compute_matmul_ratio']:.2f} of the matmul's rate)")
            log(f"{size_name} {impl:>4}: {ms:.3f} ms/query over {n} candidates{read}"
                + (f" (timed on {timed}, scaled)" if timed != n else ""))
    ca = rows[-1]
    for row in rows:
        row["ca_time_ratio"], row["ca_macs_ratio"] = ca["ms"] / row["ms"], ca["macs"] / row["macs"]
        row["ca_compute_ratio"] = ca["ms"] / row["compute_ms"]
    return rows


def plot(rows: list[dict], path: Path, overwrite: bool) -> None:
    """ms per query against joint compute (millions of MACs) and against bytes per document, log axes."""
    def lines(x: str, legend: bool) -> list[Line]:
        return [Line(legend * (f"{LABELS[r['impl']]} ({r['size']})" + r["extrapolated"] * f", timed on "
                               f"{r['timed_candidates']}"), [(r[x], r["ms"], LABELS[r["impl"]])],
                     "o" if r["size"] == "base" else "s", f"C{IMPLS.index(r['impl'])}") for r in rows if r[x]] + [
            Line("", [(r[x], r["compute_ms"])], "x", f"C{IMPLS.index(r['impl'])}") for r in rows
            if r[x] and r["read_ms"] is not None]  # the compute alone, without the store read

    first = rows[0]
    ylabel = f"ms per query ({first['candidates']} candidates)"
    where = first["gpu"] or f"{first['cpu']}, {first['threads']} thread(s)"
    draw([Panel(f"MVA Table 5, measured: {where}\n(x: compute alone, without the store read)",
                "joint compute (millions of MACs per query, mva.costs)", ylabel, lines("mflops", True)),
          Panel("ms per query against storage", "bytes per document (fp32; CA stores none)", ylabel,
                lines("bytes_per_document", False))], path, size=(6, 4.8), overwrite=overwrite)


def table(rows: list[dict]) -> str:
    """The rows as a text table; the ratios: CA's time (over the row's, over its compute alone) and MACs, the
    compute's rate over the matmul's."""
    return text_table(rows, [(key, key, spec) for key, spec in (
        ("size", ""), ("impl", ""), ("ms", ".3f"), ("read_ms", ".3f"), ("compute_ms", ".3f"),
        ("warm_read_ms", ".3f"), ("timed_candidates", "d"), ("mflops", ",.1f"), ("gflops_per_s", ".1f"),
        ("compute_gflops_per_s", ".1f"), ("matmul_gflops_per_s", ".1f"), ("compute_matmul_ratio", ".2f"),
        ("square_matmul_gflops_per_s", ".1f"),
        ("ca_time_ratio", ",.0f"), ("ca_compute_ratio", ",.0f"), ("ca_macs_ratio", ",.0f"),
        ("bytes_per_document", ","), ("store_cached", ".2f"), ("setting", ""))])


def parse_args(argv: list[str] | None):
    parser = benchmark_parser(
        "python -m mva.benchmark", "MVA Tables 5-6, measured: milliseconds per query over N candidates for DE, "
        "MVA1-3 and CA, the joint compute (the query's encoding left out) beside reading DE's and MVA's candidates "
        "from a store of --store_documents documents (drawn at random afresh for each query, read cold: dropped from "
        "the page cache first), with mva.costs' MACs and bytes per document. Disk: one store at a time, at most "
        "MVA1's (71,680 bytes a document: 1.8 GB at the default 25,000), under --store_dir or $TMPDIR.", results="mva",
        writes="speed.csv, .jsonl and .png", repeats=20,
        repeats_help="timed queries for DE and MVA (the median is reported)", device="cpu",
        seed="seeds the weights, the rows, the token ids and the candidates' draws")
    add = parser.add_argument
    add("--size", nargs="+", default=["base"], choices=tuple(SIZES), help="CA's BERT and DE's h: base = BERT-base "
        "(12 layers, h 768, FFN 3072); small = the MiniLM's (6 layers, h 384, FFN 1536)")
    add("--candidates", type=positive_int, default=1000, help="candidates per query, N")
    add("--ca_candidates", type=positive_int, default=16, help="candidates CA is timed on, scaled to --candidates")
    add("--batch_size", type=positive_int, default=16, help="CA pairs per forward pass")
    add("--ca_repeats", type=positive_int, default=3, help="timed queries for CA")
    add_store_options(parser, "DE's and each MVA point's store", documents=STORE_DOCUMENTS)
    args = parse(parser, argv)
    check_store_options(args)
    args.device = resolve_device(args.device)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with Session(args, output_paths(args.output_dir, "speed")) as session:
        session.say(f"MVA speed on {args.device}, {describe_machine()}; CA timed on {args.ca_candidates} candidates; "
                    f"DE and MVA read cold from stores of {args.store_documents:,} documents")
        rows = [row for size_name in args.size for row in measure(size_name, args, session.log)]
        for row in rows:
            session.emit(row)
        return session.finish(rows, plot=plot, table=table)


if __name__ == "__main__":
    sys.exit(main())
