"""``python -m qds.benchmark``: training and inference milliseconds per query-document pair (MSpP) of QDS-Transformer
against dense RoBERTa (Jiang et al., Findings of EMNLP 2020, Sec. 6.3, Table 5).

Rows (``system``, ``impl``): ``dense``, a from-scratch ``RobertaModel`` (SDPA attention) whose position table holds n
tokens, in `qds.model.Ranker` as FirstP (``sdpa``); ``sparse``, ``longformer_qa``, ``qds_s``, ``qds_q`` and ``qds``,
`qds.model.build_ranker` on each `common.kernels` implementation. Inputs are exactly n random tokens laid out by
`qds.inputs.build_qds_input` (a query of ``--query_tokens``, sentences of ``--sentence_tokens``: MS MARCO's mean
lengths, results/qds/README.md), so the global tokens are the real input's; ``density`` is their pattern's nonzero
fraction. ``train``: forward, BCE, backward, Adam step; ``infer``: an inference-mode forward. Each row builds its model
(seeded), warms up on 256 tokens, takes the peak memory of the first full-size batch and the median of ``--repeats``
timed ones over the batch size (``ms``), and its ratio to dense's ms in the same run (the paper's speed-up inverted).
"""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path

from common.benchmarking import (
    Line, Panel, Session, answer, benchmark_parser, draw, guarded, measure_in_child, median_ms, output_paths, parse,
    peak_mb, probability, resolve_device, rounded, text_table,
)
from common.refusals import positive_int, usage_error

SYSTEMS = ("dense", "sparse", "longformer_qa", "qds_s", "qds_q", "qds")
IMPLS, PASSES = ("reference", "portable", "tvm", "flex"), ("train", "infer")
LAYOUTS = ("official", "sos")  # qds.inputs.LAYOUTS, not imported here: qds.inputs loads torch, and --help must not
SIZE = ("num_layers", "hidden_size", "num_heads", "intermediate_size")
SIZES = {"cpu": (2, 256, 4, 1024), "cuda": (12, 768, 12, 3072)}  # reduced width (head dim 64), RoBERTa-base
SETTINGS = ("batch_size", "repeats", "warmup", *SIZE, "window", "vocab_size", "dropout", "query_tokens",
            "sentence_tokens", "layout", "threads", "seed")
FIELDS = ["bench", "system", "impl", "n", "pass", "ms", "peak_mb", "density", "ratio_to_dense", "batch_size",
          "device", *SIZE, "window", "layout", "threads", "skipped"]
BOS, PAD, EOS, FIRST_ORDINARY_ID = 0, 1, 2, 5  # RoBERTa's <s>, <pad>, </s>; ids 0-4 are special
RESULTS = Path(__file__).resolve().parents[1] / "results" / "qds"


def qds_input(n: int, query_tokens: int, sentence_tokens: int, vocab_size: int, generator, layout: str = "official"):
    """A `QDSInput` of exactly n >= query_tokens + 5 tokens in `layout` (`qds.inputs`): random ids, a query of
    `query_tokens`, sentences of `sentence_tokens`, the last one cut."""
    import torch

    from qds.inputs import build_qds_input

    def ids(k: int) -> list[int]:
        return torch.randint(FIRST_ORDINARY_ID, vocab_size, (k,), generator=generator).tolist()

    if layout == "official":  # <s> <s> query </s>, then <s> <s> sentence </s> each, cut at n as the official code
        lengths = [sentence_tokens] * (-(-(n - query_tokens - 3) // (sentence_tokens + 3)) + 1)
    else:
        whole, rest = divmod(n - query_tokens - 3, sentence_tokens + 1)  # what <s> query </s> ... </s> leaves
        lengths = [sentence_tokens] * (whole + 1)  # the document is cut at n - 1
        if rest == 1:  # an [SOS] without a token cannot end the document: the last whole sentence takes the token
            lengths[whole - 1] += 1
    built = build_qds_input(ids(query_tokens), [ids(k) for k in lengths], bos=BOS, eos=EOS, max_length=n,
                            max_sentences=len(lengths), max_query_tokens=query_tokens, layout=layout)
    assert len(built.input_ids) == n, (len(built.input_ids), n)
    return built


def make_batch(system: str, n: int, args: dict, device: str) -> dict:
    """A batch of inputs of n tokens, labels alternating 1 and 0, and `system`'s global mask."""
    import torch

    generator = torch.Generator().manual_seed(args["seed"])
    inputs = [qds_input(n, args["query_tokens"], args["sentence_tokens"], args["vocab_size"], generator,
                        args["layout"]) for _ in range(args["batch_size"])]
    batch = {"input_ids": torch.tensor([x.input_ids for x in inputs]),
             "attention_mask": torch.ones(len(inputs), n, dtype=torch.long),
             "labels": torch.tensor([float(i % 2 == 0) for i in range(len(inputs))])}
    if system != "dense":
        batch["global_attention_mask"] = torch.tensor([x.global_mask(system) for x in inputs], dtype=torch.long)
    return {key: value.to(device) for key, value in batch.items()}


def make_ranker(system: str, impl: str, n: int, args: dict):
    """`system`'s `qds.model.Ranker` at the benchmark's size, seeded, with dropout as `qds.train`'s model draws it."""
    import torch

    from common.encoders.dropout import use_fast_dropout
    from qds.model import RankingHead, Ranker, build_ranker

    torch.manual_seed(args["seed"])
    sizes, dropout = {name: args[name] for name in SIZE}, args["dropout"]
    if system != "dense":
        return build_ranker(system, None, dropout=dropout, vocab_size=args["vocab_size"], pad_token_id=PAD,
                            max_length=n, window=args["window"], impl=impl, **sizes)
    from transformers import RobertaConfig, RobertaModel  # qds.model's FirstP has 512 positions; this row needs n

    config = RobertaConfig(vocab_size=args["vocab_size"], pad_token_id=PAD, max_position_embeddings=n + PAD + 1,
                           type_vocab_size=1, hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout,
                           attn_implementation="sdpa", num_hidden_layers=sizes["num_layers"],
                           hidden_size=sizes["hidden_size"], num_attention_heads=sizes["num_heads"],
                           intermediate_size=sizes["intermediate_size"])
    head = RankingHead(sizes["hidden_size"], dropout)
    return use_fast_dropout(Ranker(RobertaModel(config, add_pooling_layer=True), head, "firstp"))


def measure(system: str, impl: str, n: int, pass_: str, args: dict, device: str) -> dict:
    """Median ms per pair and peak memory of one (system, impl, n, pass), in this process."""
    import torch

    torch.set_num_threads(args["threads"])
    ranker = make_ranker(system, impl, n, args).to(device).train(pass_ == "train")
    optimizer = torch.optim.Adam(ranker.parameters(), lr=1e-5) if pass_ == "train" else None
    loss_fn = torch.nn.BCEWithLogitsLoss()

    def step(batch: dict):
        if pass_ == "infer":
            with torch.inference_mode():
                return ranker(batch)
        loss_fn(ranker(batch), batch["labels"]).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)  # at the end: the next batch starts without gradients

    step(make_batch(system, min(n, 256), args, device))  # loads libraries, kernels, thread pools; Adam's state
    batch = make_batch(system, n, args, device)
    peak = peak_mb(lambda: step(batch), device)  # the first full-size batch
    for _ in range(args["warmup"] - 1):
        step(batch)
    return {"ms": median_ms(lambda: step(batch), args["repeats"], device) / args["batch_size"], "peak_mb": peak}


def pattern_density(system: str, n: int, args: dict) -> float:
    """Nonzero fraction of `system`'s attention matrix on the benchmark's input (1.0 for dense)."""
    if system == "dense":
        return 1.0
    import torch

    from common.kernels.patterns import density

    built = qds_input(n, args["query_tokens"], args["sentence_tokens"], 100, torch.Generator(), args["layout"])
    return density(torch.tensor(built.global_mask(system)), args["window"])  # the ids do not matter


def plot(rows: list[dict], path: Path, overwrite: bool) -> None:
    """Bars of ms per pair, train and infer side by side, one panel per length, labelled with the ratio to dense."""
    measured = [r for r in rows if r["ms"] is not None]
    label = {r["system"] + r["impl"]: "dense RoBERTa" if r["system"] == "dense" else f"{r['system']}\n{r['impl']}"
             for r in measured}
    panels = [Panel(f"n = {n}", "", "ms per query-document pair", log="y", bars=True, lines=[
        Line(pass_, [(label[r["system"] + r["impl"]], r["ms"], r["ratio_to_dense"] and f"{r['ratio_to_dense']:.2f}")
                     for r in measured
                     if (r["n"], r["pass"]) == (n, pass_)]) for pass_ in PASSES]) for n in sorted({r["n"] for r in measured})]
    first = measured[0]
    draw(panels, path, columns=1, size=(max(8, 0.55 * len(label) + 2), 4.5), overwrite=overwrite,
         title=f"{first['num_layers']} layers, hidden {first['hidden_size']}, {first['num_heads']} heads, window "
         f"{first['window']}, batch {first['batch_size']}, {first['device']}, {first['threads']} threads")


def table(rows: list[dict]) -> str:
    return text_table(rows, [(key, key, spec) for key, spec in (
        ("system", ""), ("impl", ""), ("n", "d"), ("pass", ""), ("ms", ".2f"), ("peak_mb", ".1f"), ("density", ".2%"),
        ("ratio_to_dense", ".3f"), ("skipped", ""))])


def parse_args(argv: list[str] | None):
    """The options, checked (a bad one ends the command in one line), with the device and the sizes resolved."""
    parser = benchmark_parser(
        "python -m qds.benchmark", "QDS-Transformer Table 5: training and inference milliseconds per query-document "
        "pair and attention density of dense RoBERTa and the sparse patterns on each kernel, with each row's ratio to "
        "dense RoBERTa in the same run.", results=RESULTS, writes="efficiency_<device>.csv, .jsonl and .png",
        repeats=5, repeats_help="timed batches (the median is reported)", threads=os.cpu_count(), timeout=600,
        seed="seeds the weights and the token ids", child=True)
    add = parser.add_argument
    add("--lengths", type=positive_int, nargs="+", default=[2048], metavar="N", help="input lengths in tokens")
    add("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS, metavar="SYSTEM",
        help=f"rows to run, of {', '.join(SYSTEMS)} (dense: RoBERTa with dense attention; the ratios need it)")
    add("--impls", nargs="+", default=list(IMPLS), choices=IMPLS, metavar="IMPL", help="kernels of the sparse rows")
    add("--passes", nargs="+", default=list(PASSES), choices=PASSES, help="train and/or infer")
    add("--batch_size", type=positive_int, default=2, help="query-document pairs per timed batch")
    add("--warmup", type=positive_int, default=1, help="untimed full-size batches (the first measures the memory)")
    for i, name in enumerate(SIZE):
        add(f"--{name}", type=positive_int, help=f"{name.replace('_', ' ')} (default: {SIZES['cpu'][i]} on CPU, "
            f"{SIZES['cuda'][i]} on CUDA)")
    add("--window", type=positive_int, default=128, help="local attention window w (|i - j| <= w/2), even")
    add("--vocab_size", type=positive_int, default=50265, help="vocabulary (RoBERTa's)")
    add("--dropout", type=probability, default=0.1, help="dropout in training (paper: 0.1)")
    add("--query_tokens", type=positive_int, default=8, help="query length in tokens")
    add("--sentence_tokens", type=positive_int, default=25, help="tokens per document sentence")
    add("--layout", choices=LAYOUTS, default=LAYOUTS[0], help="QDS input layout (qds.inputs)")
    add("--isolate", action="store_true", help="each measurement in a fresh process (each pays the imports)")
    args = parse(parser, argv)
    if min(args.lengths) < args.query_tokens + 5:
        usage_error(f"argument --lengths: each must be at least --query_tokens + 5 = {args.query_tokens + 5} (<s> "
                    f"query </s> [SOS] token </s>), got {min(args.lengths)}")
    if args.window % 2:
        usage_error(f"argument --window: must be even (Longformer's window spans w / 2 each side), got {args.window}")
    if args.vocab_size <= FIRST_ORDINARY_ID:
        usage_error(f"argument --vocab_size: must be above {FIRST_ORDINARY_ID} (ids 0-{FIRST_ORDINARY_ID - 1} are "
                    f"special), got {args.vocab_size}")
    args.device = resolve_device(args.device)
    for name, value in zip(SIZE, SIZES[args.device]):
        setattr(args, name, getattr(args, name) or value)
    if args.hidden_size % args.num_heads:
        usage_error(f"argument --num_heads: must divide the hidden size {args.hidden_size}, got {args.num_heads}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args._one:
        return answer(args._one, measure)
    settings = {k: getattr(args, k) for k in SETTINGS}
    with Session(args, output_paths(args.output_dir, f"efficiency_{args.device}")) as session:
        session.say(f"{args.device}: " + ", ".join(f"{k} {settings[k]}" for k in SETTINGS if k not in ("seed",)))
        rows, dense_ms = [], {}
        systems = [s for s in SYSTEMS if s in args.systems]  # dense first: later rows get their ratio at once
        for n, system in itertools.product(args.lengths, systems):
            density = round(pattern_density(system, n, settings), 6)
            for impl, pass_ in itertools.product(["sdpa"] if system == "dense" else args.impls, args.passes):
                spec = dict(system=system, impl=impl, n=n, pass_=pass_, args=settings, device=args.device)
                isolated = args.isolate and measure_in_child("qds.benchmark", spec, args.timeout)
                result = isolated or guarded(measure, **spec)
                ms = rounded(result.get("ms"), 3)
                if system == "dense" and ms is not None:
                    dense_ms[(n, pass_)] = ms
                base = dense_ms.get((n, pass_))
                row = {"bench": "qds_efficiency", "system": system, "impl": impl, "n": n, "pass": pass_, "ms": ms,
                       "peak_mb": rounded(result.get("peak_mb"), 1), "density": density,
                       "ratio_to_dense": round(ms / base, 4) if ms is not None and base else None,
                       "device": args.device, **{k: settings[k] for k in FIELDS[9:] if k in settings},
                       "skipped": result.get("skipped")}
                rows.append(row)
                session.emit(row, f"{system:>14} {impl:>9} n={n} {pass_:>5} "
                             + (f"skipped: {row['skipped']}" if ms is None else f"{ms:.2f} ms/pair"))
        return session.finish(rows, FIELDS, plot=plot, table=table)


if __name__ == "__main__":
    sys.exit(main())
