"""``python -m qds.benchmark``: training and inference milliseconds per query-document pair, QDS vs dense (Table 5).

Rows (``system``, ``impl``): ``dense`` (RoBERTa, SDPA) and ``sparse``, ``longformer_qa``, ``qds_s``, ``qds_q``, ``qds``
on each `common.kernels` implementation, on exactly n tokens (`qds.inputs.exact_batch`, MS MARCO's mean query and
sentence lengths). ``train``: forward, BCE, backward, Adam; ``infer``: an inference-mode forward. ``ms`` is the median
of ``--repeats`` batches over the batch size, after a warm-up; ``peak_mb`` the first full-size batch's.
docs/qds_benchmark.md has the details.
"""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path

from common.benchmarks.bert_inputs import BertSize, add_size_options, resolve_size
from common.benchmarks.fresh_process import answer, guarded, measure_in_child
from common.benchmarks.options import benchmark_parser, even_int, int_above, parse, probability, resolve_device
from common.benchmarks.plots import bar_chart
from common.benchmarks.session import Session, output_paths, rounded
from common.benchmarks.timing import inference_step, measure_step, training_step
from common.refusals import positive_int, usage_error
from qds import WINDOW

#: ``--window``'s type in the QDS commands: Longformer's window is even.
WINDOW_TYPE = even_int("Longformer's window spans w / 2 each side")
SYSTEMS = ("dense", "sparse", "longformer_qa", "qds_s", "qds_q", "qds")
IMPLS, PASSES = ("reference", "portable", "tvm", "flex"), ("train", "infer")
LAYOUTS = ("official", "sos")
FIRST_ORDINARY_ID = 5
SIZES = {"cpu": BertSize(2, 256, 4, 1024), "cuda": BertSize(12, 768, 12, 3072)}
INPUTS = ("query_tokens", "sentence_tokens", "vocab_size", "layout", "seed")
SETTINGS = ("batch_size", "repeats", "warmup", *BertSize.OPTIONS, "window", "vocab_size", "dropout", "query_tokens",
            "sentence_tokens", "layout", "threads", "seed")
FIELDS = ["bench", "system", "impl", "n", "pass", "ms", "peak_mb", "density", "ratio_to_dense", "batch_size",
          "device", *BertSize.OPTIONS, "window", "layout", "threads", "skipped"]
TABLE = (("system", ""), ("impl", ""), ("n", "d"), ("pass", ""), ("ms", ".2f"), ("peak_mb", ".1f"),
         ("density", ".2%"), ("ratio_to_dense", ".3f"), ("skipped", ""))


def measure(system: str, impl: str, n: int, pass_: str, args: dict, device: str) -> dict:
    """Median ms per pair and peak memory of one (system, impl, n, pass), in this process."""
    import torch
    import torch.nn.functional as F
    from transformers import RobertaConfig, RobertaModel

    from common.encoders.dropout import use_fast_dropout
    from qds.inputs import PAD, exact_batch
    from qds.model import RankingHead, Ranker, build_ranker

    torch.set_num_threads(args["threads"])
    torch.manual_seed(args["seed"])
    size, dropout = BertSize(*(args[name] for name in BertSize.OPTIONS)), args["dropout"]
    if system == "dense":
        config = RobertaConfig(vocab_size=args["vocab_size"], pad_token_id=PAD, max_position_embeddings=n + PAD + 1,
                               type_vocab_size=1, hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout,
                               attn_implementation="sdpa", **size.hf_config())
        encoder, head = RobertaModel(config, add_pooling_layer=True), RankingHead(size.hidden, dropout)
        ranker = use_fast_dropout(Ranker(encoder, head, "firstp")).to(device)
    else:
        ranker = build_ranker(system, None, dropout=dropout, vocab_size=args["vocab_size"], pad_token_id=PAD,
                              max_length=n, window=args["window"], impl=impl, **size.options()).to(device)
    step = (training_step(ranker, lambda batch: F.binary_cross_entropy_with_logits(ranker(batch), batch["labels"]),
                          lr=1e-5) if pass_ == "train" else inference_step(ranker))
    inputs = dict(batch_size=args["batch_size"], pattern=None if system == "dense" else system, device=device,
                  **{key: args[key] for key in INPUTS})
    step(exact_batch(min(n, 256), **inputs))
    measured = measure_step(step, exact_batch(n, **inputs), warmup=args["warmup"], repeats=args["repeats"],
                            device=device)
    return {"ms": measured["ms"] / args["batch_size"], "peak_mb": measured["peak_mb"]}


def plot(rows: list[dict], path: Path, overwrite: bool) -> None:
    """Bars of ms per pair, train and infer side by side, one panel per length, labelled with the ratio to dense."""
    first = next(r for r in rows if r["ms"] is not None)
    bar_chart(rows, path, passes=PASSES, ylabel="ms per query-document pair", overwrite=overwrite,
              label=lambda r: "dense RoBERTa" if r["system"] == "dense" else f"{r['system']}\n{r['impl']}",
              text=lambda r: r["ratio_to_dense"] and f"{r['ratio_to_dense']:.2f}",
              title=f"{first['num_layers']} layers, hidden {first['hidden_size']}, {first['num_heads']} heads, window "
              f"{first['window']}, batch {first['batch_size']}, {first['device']}, {first['threads']} threads")


def parse_args(argv: list[str] | None):
    """The options, checked (a bad one ends the command in one line), with the device and the sizes resolved."""
    parser = benchmark_parser(
        "python -m qds.benchmark", "QDS-Transformer Table 5: training and inference milliseconds per query-document "
        "pair and attention density of dense RoBERTa and the sparse patterns on each kernel, with each row's ratio to "
        "dense RoBERTa in the same run.", results="qds", writes="efficiency_<device>.csv, .jsonl and .png",
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
    add_size_options(parser, SIZES)
    add("--window", type=WINDOW_TYPE, default=WINDOW, help="local attention window w (|i - j| <= w/2), even")
    add("--vocab_size", type=int_above(FIRST_ORDINARY_ID, f"ids 0-{FIRST_ORDINARY_ID - 1} are special"), default=50265,
        help="vocabulary (RoBERTa's)")
    add("--dropout", type=probability, default=0.1, help="dropout in training (paper: 0.1)")
    add("--query_tokens", type=positive_int, default=8, help="query length in tokens")
    add("--sentence_tokens", type=positive_int, default=25, help="tokens per document sentence")
    add("--layout", choices=LAYOUTS, default=LAYOUTS[0], help="QDS input layout (qds.inputs)")
    add("--isolate", action="store_true", help="each measurement in a fresh process (each pays the imports)")
    args = parse(parser, argv)
    if min(args.lengths) < args.query_tokens + 5:
        usage_error(f"argument --lengths: each must be at least --query_tokens + 5 = {args.query_tokens + 5} (<s> "
                    f"query </s> [SOS] token </s>), got {min(args.lengths)}")
    args.device = resolve_device(args.device)
    resolve_size(args, SIZES)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args._one:
        return answer(args._one, measure)
    settings = {k: getattr(args, k) for k in SETTINGS}
    with Session(args, output_paths(args.output_dir, f"efficiency_{args.device}")) as session:
        session.say(f"{args.device}: " + ", ".join(f"{k} {settings[k]}" for k in SETTINGS if k not in ("seed",)))
        from qds.inputs import exact_density

        rows = []
        for n, system in itertools.product(args.lengths, sorted(args.systems, key=SYSTEMS.index)):
            density = 1.0 if system == "dense" else round(exact_density(
                system, n, args.query_tokens, args.sentence_tokens, args.window, args.layout), 6)
            for impl, pass_ in itertools.product(["sdpa"] if system == "dense" else args.impls, args.passes):
                spec = dict(system=system, impl=impl, n=n, pass_=pass_, args=settings, device=args.device)
                result = (measure_in_child("qds.benchmark", spec, args.timeout) if args.isolate
                          else guarded(measure, **spec))
                ms = rounded(result.get("ms"), 3)
                dense = [r["ms"] for r in rows if (r["system"], r["n"], r["pass"]) == ("dense", n, pass_)]
                base = ms if system == "dense" else next(iter(dense), None)
                row = {"bench": "qds_efficiency", "system": system, "impl": impl, "n": n, "pass": pass_, "ms": ms,
                       "peak_mb": rounded(result.get("peak_mb"), 1), "density": density,
                       "ratio_to_dense": round(ms / base, 4) if ms is not None and base else None,
                       "device": args.device, **{k: settings[k] for k in FIELDS[9:] if k in settings},
                       "skipped": result.get("skipped")}
                rows.append(session.emit(row, f"{system:>14} {impl:>9} n={n} {pass_:>5} "
                                         + (f"skipped: {row['skipped']}" if ms is None else f"{ms:.2f} ms/pair")))
        return session.finish(rows, FIELDS, plot=plot, table=TABLE)


if __name__ == "__main__":
    sys.exit(main())
