"""``python -m mva.benchmark``: milliseconds of joint compute per query over N candidates for the dual encoder (DE),
the three MVA operating points and cross-attention (CA), beside the calculator's MACs (`mva.costs`) and each
method's bytes per document (Zhou and Devlin 2021, Tables 5-6, which count joint compute and storage; timed here).

- ``de``: the query's h-vector against N stored h-vectors (one matrix-vector product);
- ``mva1``-``mva3``: `mva.model.MultiVectorAttention.score` over N candidates' stored [D_K | D_V] rows (random: the
  cost does not depend on their values) with the query's Q_K and Q_V expanded over them, at `mva.costs.table5`'s
  operating points, all N in one call;
- ``ca``: `common.encoders.bert_rankers.BertRanker` over pairs of 128 tokens in batches of ``--batch_size``, timed on
  ``--ca_candidates`` and scaled linearly to N (``extrapolated``: every candidate is the same work).

Left out, as in the paper's joint compute: the query's encoding and the documents' (offline); the rows are in
memory. ``ms`` is the median of ``--repeats`` calls (``--ca_repeats`` for CA) after a warm-up call; ``ca_time_ratio``
and ``ca_macs_ratio`` are CA's ms and MACs over the row's, measured and counted. Sizes (CA's BERT, DE's h): ``base``
(BERT-base, the paper's) and ``small`` (the offline MiniLM's), from scratch with random weights.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NamedTuple

from common.benchmarking import (
    BERT_CLS, BERT_PAD, BERT_SEP, BERT_VOCAB_SIZE, FIRST_WORD, BertSize, Line, Panel, Session, benchmark_parser,
    bert_pairs, describe_machine, draw, gpu_description, machine, median_ms, output_paths, parse, resolve_device,
    text_table,
)
from common.refusals import positive_int
from mva.costs import PAIR_TOKENS, QUERY_TIMESTEPS, bert_macs, dual_encoder_macs, mva_macs, mva_storage

IMPLS = ("de", "mva1", "mva2", "mva3", "ca")
LABELS = {"de": "DE", "mva1": "MVA1", "mva2": "MVA2", "mva3": "MVA3", "ca": "CA"}
RESULTS = Path(__file__).resolve().parents[1] / "results" / "mva"
FLOAT_BYTES = 4  # fp32
SIZES = {"base": BertSize(12, 768, 12, 3072), "small": BertSize(6, 384, 12, 1536)}


class Point(NamedTuple):
    """An MVA operating point (`mva.costs.table5`): q query and d document timesteps, projection p, H heads."""

    query: int
    doc: int
    projection: int
    heads: int = 1


POINTS = {"mva1": Point(QUERY_TIMESTEPS, 70, 128), "mva2": Point(8, 24, 64), "mva3": Point(8, 16, 32)}


def cost(impl: str, size: BertSize) -> tuple[int, int, str]:
    """MACs per candidate, floats stored per document and the setting of `impl` at `size`, from `mva.costs`."""
    if impl == "de":
        return dual_encoder_macs(size.hidden), size.hidden, f"dot product of h = {size.hidden}"
    if impl == "ca":
        return (bert_macs(PAIR_TOKENS, size.layers, size.hidden, size.intermediate), 0,
                f"BERT ({size.describe()}) over {PAIR_TOKENS} pair tokens")
    q, d, p, heads = POINTS[impl]
    return (mva_macs(q, d, p, heads), mva_storage(d, p, heads),
            f"q = {q}, d = {d}, p = {p}" + (f", H = {heads}" if heads > 1 else ""))


def mva_step(point: Point, candidates: int, device: str, seed: int):
    """`MultiVectorAttention.score` of one query over `candidates` stored [D_K | D_V] rows (random, seeded)."""
    import torch

    from mva.model import MultiVectorAttention

    torch.manual_seed(seed)
    hp = point.heads * point.projection
    head = MultiVectorAttention(hp, hp, point.projection, point.heads).eval().to(device)  # only `score` runs
    query_keys = torch.randn(1, point.query, hp, device=device).expand(candidates, -1, -1)
    query_values = torch.randn(1, point.query, hp, device=device).expand(candidates, -1, -1)
    query_keep = torch.ones(1, point.query, dtype=torch.bool, device=device).expand(candidates, -1)
    documents = torch.randn(candidates, point.doc, 2 * hp, device=device)
    doc_keep = torch.ones(candidates, point.doc, dtype=torch.bool, device=device)
    return lambda: head.score(query_keys, query_values, query_keep, documents, doc_keep)


def de_step(hidden: int, candidates: int, device: str, seed: int):
    """The query's h-vector against `candidates` stored h-vectors."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    documents = torch.randn(candidates, hidden, generator=generator).to(device)
    query = torch.randn(hidden, generator=generator).to(device)
    return lambda: documents @ query


def ca_step(size: BertSize, count: int, batch_size: int, device: str, seed: int):
    """CA over `count` pairs ``[CLS] query [SEP] document [SEP]`` (PAIR_TOKENS tokens, the query's QUERY_TIMESTEPS - 1
    words in every pair) in batches of `batch_size`, with a from-scratch BERT of `size`; and a warm-up of one batch."""
    import torch

    from common.encoders.bert_rankers import BertRanker
    from common.encoders.pretrained import from_scratch_bert

    bert = from_scratch_bert(seed, vocab_size=BERT_VOCAB_SIZE, pad_token_id=BERT_PAD, dropout=0.1,
                             max_length=max(512, PAIR_TOKENS), **size.options())
    ranker = BertRanker(bert).eval().to(device)
    generator = torch.Generator().manual_seed(seed)
    query = torch.randint(FIRST_WORD, BERT_VOCAB_SIZE, (1, QUERY_TIMESTEPS - 1), generator=generator)
    words = torch.randint(FIRST_WORD, BERT_VOCAB_SIZE, (count, PAIR_TOKENS - QUERY_TIMESTEPS - 2),
                          generator=generator)
    query = torch.cat([torch.tensor([[BERT_CLS]]), query, torch.tensor([[BERT_SEP]])], dim=1)
    pairs = bert_pairs(query, words, BERT_SEP)
    batches = [{k: v[i:i + batch_size].to(device) for k, v in pairs.items()} for i in range(0, count, batch_size)]
    return (lambda: torch.cat([ranker(batch) for batch in batches])), (lambda: ranker(batches[0]))


def measure(size_name: str, args, log) -> list[dict]:
    """Every method at one size; rows in `IMPLS` order, CA's ratios filled in."""
    import torch

    size, n, rows = SIZES[size_name], args.candidates, []
    with torch.inference_mode():
        for impl in IMPLS:
            macs, floats, setting = cost(impl, size)
            point, ca = POINTS.get(impl), impl == "ca"
            timed, repeats = (min(args.ca_candidates, n), args.ca_repeats) if ca else (n, args.repeats)
            if ca:
                step, warm_up = ca_step(size, timed, args.batch_size, args.device, args.seed)
            else:
                step = warm_up = (mva_step(point, n, args.device, args.seed) if point
                                  else de_step(size.hidden, n, args.device, args.seed))
            warm_up()
            timed_ms, here = median_ms(step, repeats, args.device), machine()
            ms = timed_ms * n / timed  # linear in the candidates: each is independent work of the same size
            rows.append({
                "bench": "mva_speed", "impl": impl, "size": size_name, "candidates": n, "timed_candidates": timed,
                "extrapolated": timed != n, "ms": ms, "timed_ms": timed_ms, "macs": macs * n, "mflops": macs * n / 1e6,
                "gflops_per_s": 2 * macs * n / ms / 1e6, "ca_time_ratio": None, "ca_macs_ratio": None,
                "storage_floats": floats, "bytes_per_document": FLOAT_BYTES * floats, "setting": setting,
                "query_timesteps": point.query if point else (QUERY_TIMESTEPS if ca else 1),
                "doc_timesteps": point.doc if point else (None if ca else 1),
                "projection": point and point.projection, "heads": point and point.heads,
                "hidden_size": None if point else size.hidden, "num_layers": size.layers if ca else None,
                "intermediate_size": size.intermediate if ca else None, "pair_tokens": PAIR_TOKENS if ca else None,
                "batch_size": min(args.batch_size, timed) if ca else n, "repeats": repeats, "device": args.device,
                "gpu": gpu_description(args.device), **{k: here[k] for k in ("cpu", "threads", "load_1min")}})
            log(f"{size_name} {impl:>4}: {ms:.3f} ms/query over {n} candidates"
                + (f" (timed on {timed}, scaled)" if timed != n else ""))
    for row in rows:
        row["ca_time_ratio"], row["ca_macs_ratio"] = rows[-1]["ms"] / row["ms"], rows[-1]["macs"] / row["macs"]
    return rows


def plot(rows: list[dict], path: Path, overwrite: bool) -> None:
    """ms per query against joint compute (millions of MACs) and against bytes per document (CA, which stores
    nothing, left out), log axes; one marker per size, one colour per method."""
    def lines(x: str, legend: bool) -> list[Line]:
        return [Line(legend * (f"{LABELS[r['impl']]} ({r['size']})" + r["extrapolated"] * f", timed on "
                               f"{r['timed_candidates']}"), [(r[x], r["ms"], LABELS[r["impl"]])],
                     "o" if r["size"] == "base" else "s", f"C{IMPLS.index(r['impl'])}") for r in rows if r[x]]

    first = rows[0]
    ylabel = f"ms per query ({first['candidates']} candidates)"
    where = first["gpu"] or f"{first['cpu']}, {first['threads']} thread(s)"
    draw([Panel(f"MVA Table 5, measured: {where}", "joint compute (millions of MACs per query, mva.costs)", ylabel,
                lines("mflops", True)),
          Panel("ms per query against storage", "bytes per document (fp32; CA stores none)", ylabel,
                lines("bytes_per_document", False))], path, size=(6, 4.8), overwrite=overwrite)


def table(rows: list[dict]) -> str:
    """The rows as a text table; CA/ms and CA/MACs: CA's time and MACs over the row's."""
    return text_table(rows, [(key, key, spec) for key, spec in (
        ("size", ""), ("impl", ""), ("ms", ".3f"), ("timed_candidates", "d"), ("mflops", ",.1f"),
        ("gflops_per_s", ".1f"), ("ca_time_ratio", ",.0f"), ("ca_macs_ratio", ",.0f"), ("bytes_per_document", ","),
        ("setting", ""))])


def parse_args(argv: list[str] | None):
    parser = benchmark_parser(
        "python -m mva.benchmark", "MVA Tables 5-6, measured: milliseconds of joint compute per query over N "
        "candidates for DE, MVA1-3 and CA (the query's encoding left out), beside mva.costs' MACs and bytes per "
        "document.", results=RESULTS, writes="speed.csv, .jsonl and .png", repeats=20,
        repeats_help="timed queries for DE and MVA (the median is reported)", device="cpu",
        seed="seeds the weights, the rows and the token ids")
    add = parser.add_argument
    add("--size", nargs="+", default=["base"], choices=tuple(SIZES), help="CA's BERT and DE's h: base = BERT-base "
        "(12 layers, h 768, FFN 3072); small = the MiniLM's (6 layers, h 384, FFN 1536)")
    add("--candidates", type=positive_int, default=1000, help="candidates per query, N")
    add("--ca_candidates", type=positive_int, default=16, help="candidates CA is timed on, scaled to --candidates")
    add("--batch_size", type=positive_int, default=16, help="CA pairs per forward pass")
    add("--ca_repeats", type=positive_int, default=3, help="timed queries for CA")
    args = parse(parser, argv)
    args.device = resolve_device(args.device)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with Session(args, output_paths(args.output_dir, "speed")) as session:
        session.say(f"MVA speed on {args.device}, {describe_machine()}; CA timed on {args.ca_candidates} candidates")
        rows = [row for size_name in args.size for row in measure(size_name, args, session.log)]
        for row in rows:
            session.emit(row)
        return session.finish(rows, plot=plot, table=table)


if __name__ == "__main__":
    sys.exit(main())
