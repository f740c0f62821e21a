"""``python -m qds.benchmark``: training and inference cost of QDS-Transformer vs dense RoBERTa (paper Table 5).

QDS-Transformer (Jiang et al., Findings of EMNLP 2020), Sec. 6.3 "Model Efficiency", Table 5
reports training and inference time in milliseconds per query-document pair (MSpP) at 2048
tokens for RoBERTa (dense attention, random parameters), Sparse-Transformer (local window
only), QDS-Transformer (S), (Q) and QDS, with each pattern's attention density ("Sparse-
Transformer (128) ... only 4.56% non-zero entries"); the introduction sums it up as "200%+
speed up compared to vanilla BERT on long documents". This command measures the same rows on
`qds.model`'s encoders (plus Longformer-QA):

- ``dense``: a from-scratch ``RobertaModel`` (SDPA attention) whose position table holds n
  tokens, wrapped in ``Ranker`` as the ``firstp`` baseline (``impl`` = ``sdpa``);
- ``sparse``, ``longformer_qa``, ``qds_s``, ``qds_q``, ``qds``: ``build_encoder`` (Longformer
  layout on `common.kernels`) once per attention implementation (``reference`` = dense masked
  softmax, ``portable``, ``tvm``, ``flex``); a pass an implementation cannot run here (flex has
  no CPU backward) is recorded as skipped, with the reason.

Inputs are exactly n tokens, built by `qds.inputs.build_qds_input` (``--layout``: the official
layout by default) from random token ids with an MS MARCO-like layout (a query of 8 tokens,
sentences of 25 tokens: the mean lengths in words of MS MARCO queries and sentences, 5.9 and
18.6, times ~1.3 BPE tokens a word; see results/qds/README.md), so
the global tokens are those of the real input construction; ``density`` is
`common.kernels.patterns.density` of that global mask (1.0 for ``dense``).

Passes, per batch of ``--batch_size`` pairs: ``train`` = forward + BCE loss + backward + Adam
step (model in train mode, dropout 0.1); ``infer`` = a ``torch.inference_mode`` forward (eval
mode). ``ms`` is the median over ``--repeats`` timed batches divided by the batch size (MSpP).
Each (system, impl, n, pass) builds its model (seeded), warms up on a batch of 256 tokens (which
also creates Adam's state), then runs ``--warmup`` untimed full-size batches. ``peak_mb`` is, as
in `common.kernels.benchmark`, the rise of the peak resident set during the first full-size
batch above the resident set before it; measurements share this process (``--isolate``: a fresh
subprocess each), so the peak is reset first (glibc ``malloc_trim``, then ``/proc/self/clear_refs``).
CUDA: ``max_memory_allocated`` above the allocated memory before it. ``ratio_to_dense`` = ms / ms
of ``dense`` measured in the same run (same n and pass); the paper's speed-up is its inverse.

Sizes: on CPU a reduced-width model by default (2 layers, hidden 256, 4 heads of 64,
intermediate 1024); on CUDA RoBERTa-base (12 layers, 768, 12 heads, 3072). Window 128.
Writes ``efficiency_<device>.csv``, ``.jsonl`` and ``.png`` under ``--output_dir``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from common.benchmarking import (
    DEVICES, cuda_peak_mb, max_rss_mb, median_ms, peak_rss_mb, probability, refuse_existing,
    refuse_repeats, reset_peak_rss, resolve_device, rss_mb, run_isolated, write_rows,
)
from common.refusals import ArgumentParser, output_folder, positive_float, positive_int

if TYPE_CHECKING:
    import torch

SYSTEMS = ("dense", "sparse", "longformer_qa", "qds_s", "qds_q", "qds")
IMPLS = ("reference", "portable", "tvm", "flex")
PASSES = ("train", "infer")
DENSE_IMPL = "sdpa"
RESULTS = Path(__file__).resolve().parents[1] / "results" / "qds"
SIZES = {  # num_layers, hidden_size, num_heads, intermediate_size
    "cpu": (2, 256, 4, 1024),  # reduced width: head dim 64 as in RoBERTa-base
    "cuda": (12, 768, 12, 3072),  # RoBERTa-base, as the paper
}
FIELDS = ["bench", "system", "impl", "n", "pass", "ms", "peak_mb", "density", "ratio_to_dense", "batch_size",
          "device", "num_layers", "hidden_size", "num_heads", "intermediate_size", "window", "layout", "threads",
          "skipped"]
BOS, PAD, EOS, FIRST_ORDINARY_ID = 0, 1, 2, 5  # RoBERTa's <s>, <pad>, </s>; ids 0-4 are special
WARMUP_N = 256
LAYOUTS = ("official", "sos")  # qds.inputs.LAYOUTS, not imported here: qds.inputs loads torch, and --help must not


# --------------------------------------------------------------------------- inputs and models


def qds_input(n: int, query_tokens: int, sentence_tokens: int, vocab_size: int, generator: torch.Generator,
              layout: str = "official"):
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


def pattern_density(system: str, n: int, window: int, query_tokens: int, sentence_tokens: int,
                    layout: str = "official") -> float:
    """Nonzero fraction of the attention matrix of `system` on the benchmark's input in `layout` (1.0 for dense)."""
    if system == "dense":
        return 1.0
    import torch

    from common.kernels.patterns import density

    built = qds_input(n, query_tokens, sentence_tokens, 100, torch.Generator(), layout)  # the ids do not matter
    return density(torch.tensor(built.global_mask(system)), window)


def make_batch(system: str, n: int, args: dict, device: str) -> dict:
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


def build_ranker(system: str, impl: str, n: int, args: dict):
    """`qds.model.Ranker` of `system` at the benchmark's size, seeded."""
    import torch
    from transformers import RobertaConfig, RobertaModel

    from common.encoders.dropout import use_fast_dropout
    from qds.model import RankingHead, Ranker, build_encoder

    torch.manual_seed(args["seed"])
    sizes = dict(num_hidden_layers=args["num_layers"], hidden_size=args["hidden_size"],
                 num_attention_heads=args["num_heads"], intermediate_size=args["intermediate_size"])
    if system == "dense":  # qds.model's FirstP encoder has 512 positions; the dense row needs n
        config = RobertaConfig(vocab_size=args["vocab_size"], pad_token_id=PAD, max_position_embeddings=n + PAD + 1,
                               type_vocab_size=1, hidden_dropout_prob=args["dropout"],
                               attention_probs_dropout_prob=args["dropout"], attn_implementation="sdpa", **sizes)
        encoder, pattern = RobertaModel(config, add_pooling_layer=True), "firstp"
    else:
        encoder = build_encoder(system, None, vocab_size=args["vocab_size"], pad_token_id=PAD, max_length=n,
                                window=args["window"], num_layers=args["num_layers"], hidden_size=args["hidden_size"],
                                num_heads=args["num_heads"], intermediate_size=args["intermediate_size"],
                                dropout=args["dropout"], impl=impl)
        pattern = system
    # Dropout as qds.train's model draws it (`common.encoders.dropout`); dense RoBERTa's on the probabilities is SDPA's own.
    return use_fast_dropout(Ranker(encoder, RankingHead(args["hidden_size"], args["dropout"]), pattern))


# --------------------------------------------------------------------------- one measurement


def make_step(ranker, batch: dict, pass_: str, optimizer=None):
    """A zero-argument callable running `ranker` on one batch of `pass_` (``train`` needs the optimizer)."""
    import torch

    if pass_ == "infer":
        ranker.eval()

        def infer():
            with torch.inference_mode():
                return ranker(batch)

        return infer
    ranker.train()
    loss_fn = torch.nn.BCEWithLogitsLoss()

    def train():
        loss = loss_fn(ranker(batch), batch["labels"])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)  # at the end: the next batch starts without gradients
        return loss

    return train


def measure(system: str, impl: str, n: int, pass_: str, args: dict, device: str) -> dict:
    """Median ms per pair and peak memory of one (system, impl, n, pass) in this process."""
    import torch

    torch.set_num_threads(args["threads"])
    gc.collect()  # the previous measurement's model and optimizer
    ranker = build_ranker(system, impl, n, args).to(device)  # its position table holds n tokens
    optimizer = torch.optim.Adam(ranker.parameters(), lr=1e-5) if pass_ == "train" else None
    # A small batch first loads libraries, kernels and thread pools and creates Adam's state.
    make_step(ranker, make_batch(system, min(n, WARMUP_N), args, device), pass_, optimizer)()
    step = make_step(ranker, make_batch(system, n, args, device), pass_, optimizer)
    for i in range(max(args["warmup"], 1)):  # the first full-size batch gives the peak memory
        if i == 0 and device == "cuda":
            peak_mb = cuda_peak_mb(step)
        elif i == 0:
            reset = reset_peak_rss()
            before = rss_mb()
            step()
            peak_mb = max((peak_rss_mb() if reset else max_rss_mb()) - before, 0.0)
        else:
            step()
    return {"ms": median_ms(step, args["repeats"], device) / args["batch_size"], "peak_mb": peak_mb}


def measure_isolated(system: str, impl: str, n: int, pass_: str, args: dict, device: str) -> dict:
    """`measure` in a fresh subprocess, so that its peak resident set belongs to this measurement alone."""
    spec = json.dumps({"system": system, "impl": impl, "n": n, "pass": pass_, "device": device, "args": args})
    command = [sys.executable, "-m", "qds.benchmark", "--_one", spec]
    result = run_isolated(command, args["timeout"])
    if result.get("skipped", "").startswith("over the"):
        result["skipped"] += " (--timeout)"
    return result


def measure_guarded(system: str, impl: str, n: int, pass_: str, args: dict, device: str) -> dict:
    """`measure` in this process; a measurement that fails (flex has no CPU backward, out of memory, a kernel
    that does not build) gives {"skipped": reason}, as a failed subprocess does with ``--isolate``."""
    import torch

    try:
        return measure(system, impl, n, pass_, args, device)
    except Exception as error:  # noqa: BLE001 - one row's failure must not lose the others
        return {"skipped": f"{type(error).__name__}: {error}".splitlines()[0]}
    finally:
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()


# --------------------------------------------------------------------------- outputs


def output_paths(out_dir: Path, device: str) -> dict[str, Path]:
    return {ext: out_dir / f"efficiency_{device}.{ext}" for ext in ("csv", "jsonl", "png")}


def write_outputs(rows: list[dict], paths: dict[str, Path], overwrite: bool) -> None:
    write_rows(rows, FIELDS, paths["csv"], paths["jsonl"], overwrite)
    _plot(rows, paths["png"], overwrite)


def _label(row: dict) -> str:
    return "dense RoBERTa" if row["system"] == "dense" else f"{row['system']}\n{row['impl']}"


def _plot(rows: list[dict], path: Path, overwrite: bool) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from common.io import atomic_write

    measured = [r for r in rows if r["ms"] is not None]
    lengths = sorted({r["n"] for r in measured})
    labels = list(dict.fromkeys(_label(r) for r in measured))
    figure, axes = plt.subplots(len(lengths), 1, figsize=(max(8, 0.55 * len(labels) + 2), 4.5 * len(lengths)),
                                squeeze=False)
    for axis, n in zip(axes[:, 0], lengths):
        for offset, pass_ in zip((-0.2, 0.2), PASSES):
            index = {_label(r): r for r in measured if r["n"] == n and r["pass"] == pass_}
            xs = [i + offset for i, label in enumerate(labels) if label in index]
            values = [index[label]["ms"] for label in labels if label in index]
            bars = axis.bar(xs, values, width=0.4, label=pass_)
            for bar, label in zip(bars, [label for label in labels if label in index]):
                ratio = index[label]["ratio_to_dense"]
                if ratio is not None:
                    axis.annotate(f"{ratio:.2f}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                                  ha="center", va="bottom", fontsize=6, rotation=90)
        for i, label in enumerate(labels):  # a pass that could not run here (flex has no CPU backward)
            for offset, pass_ in zip((-0.2, 0.2), PASSES):
                if any(_label(r) == label and r["n"] == n and r["pass"] == pass_ and r["ms"] is None for r in rows):
                    axis.annotate("n/a", (i + offset, 0), xycoords=("data", "axes fraction"), ha="center",
                                  va="bottom", fontsize=6, rotation=90)
        axis.set_xticks(range(len(labels)), labels, fontsize=7, rotation=90)
        axis.set_yscale("log")
        axis.set_ylim(top=2 * max(r["ms"] for r in measured if r["n"] == n))  # room for the labels
        axis.set_ylabel("ms per query-document pair")
        axis.grid(True, axis="y", which="both", alpha=0.3)
        first = measured[0]
        axis.set_title(f"n = {n}: {first['num_layers']} layers, hidden {first['hidden_size']}, "
                       f"{first['num_heads']} heads, window {first['window']}, batch {first['batch_size']}, "
                       f"{first['device']}, {first['threads']} threads (labels: ratio to dense)", fontsize=9)
        axis.legend(fontsize=8)
    figure.tight_layout()
    with atomic_write(path, "wb", overwrite=overwrite) as f:
        figure.savefig(f, format="png", dpi=110)
    plt.close(figure)


def table(rows: list[dict]) -> str:
    """The measurements as a text table, with the ratio to dense and its inverse (speed-up)."""
    lines = [f"{'system':<14}{'impl':<11}{'n':>6} {'pass':<6}{'ms/pair':>10}{'peak MB':>10}{'density':>9}"
             f"{'x dense':>9}{'speed-up':>9}"]
    for r in rows:
        if r["ms"] is None:
            lines.append(f"{r['system']:<14}{r['impl']:<11}{r['n']:>6} {r['pass']:<6}  skipped: {r['skipped']}")
            continue
        ratio = r["ratio_to_dense"]
        lines.append(f"{r['system']:<14}{r['impl']:<11}{r['n']:>6} {r['pass']:<6}{r['ms']:>10.2f}{r['peak_mb']:>10.1f}"
                     f"{r['density']:>9.2%}" + (f"{ratio:>9.3f}{1 / ratio:>8.2f}x" if ratio else f"{'-':>9}{'-':>9}"))
    return "\n".join(lines)


# --------------------------------------------------------------------------- command line


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Each option's default after its help, but for None: the help of those options says what they default to."""

    def _get_help_string(self, action: argparse.Action) -> str:
        return action.help if action.default is None else super()._get_help_string(action)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The options, checked (a bad one ends the command in one line, `common.refusals`), with the device and the
    model sizes resolved."""
    cpu, cuda = SIZES["cpu"], SIZES["cuda"]
    parser = ArgumentParser(
        prog="python -m qds.benchmark",
        description="QDS-Transformer Table 5: training and inference milliseconds per query-document pair (MSpP) "
        "and attention density of dense RoBERTa, Sparse-Transformer, Longformer-QA, QDS(S), QDS(Q) and QDS, per "
        "sparse attention implementation, with the ratio of each row to dense RoBERTa measured in the same run. "
        "Writes efficiency_<device>.csv, .jsonl and .png under --output_dir.",
        formatter_class=_Help,
    )
    parser.add_argument("--lengths", type=positive_int, nargs="+", default=[2048], metavar="N",
                        help="input lengths in tokens, each at least --query_tokens + 5")
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS, metavar="SYSTEM",
                        help=f"rows to run, of {', '.join(SYSTEMS)} (dense: RoBERTa with dense SDPA attention; "
                        "the ratios need it)")
    parser.add_argument("--impls", nargs="+", default=list(IMPLS), choices=IMPLS, metavar="IMPL",
                        help=f"common.kernels implementations for the sparse rows, of {', '.join(IMPLS)}")
    parser.add_argument("--passes", nargs="+", default=list(PASSES), choices=PASSES,
                        help="train: forward + backward + Adam step; infer: inference_mode forward")
    parser.add_argument("--batch_size", type=positive_int, default=2, help="query-document pairs per timed batch")
    parser.add_argument("--repeats", type=positive_int, default=5, help="timed batches (the median is reported)")
    parser.add_argument("--warmup", type=positive_int, default=1,
                        help="untimed full-size batches before the timed ones (at least 1: it measures peak memory)")
    parser.add_argument("--device", choices=DEVICES, help="device (default: cuda when available)")
    size = "default: %s on CPU, %s on CUDA"
    parser.add_argument("--num_layers", type=positive_int, help=size % (cpu[0], cuda[0]))
    parser.add_argument("--hidden_size", type=positive_int, help=size % (cpu[1], cuda[1]))
    parser.add_argument("--num_heads", type=positive_int,
                        help=size % (cpu[2], cuda[2]) + "; must divide the hidden size")
    parser.add_argument("--intermediate_size", type=positive_int, help=size % (cpu[3], cuda[3]))
    parser.add_argument("--window", type=positive_int, default=128,
                        help="local attention window w (|i - j| <= w/2), even")
    parser.add_argument("--vocab_size", type=positive_int, default=50265,
                        help=f"vocabulary (RoBERTa's), more than the {FIRST_ORDINARY_ID} special ids")
    parser.add_argument("--dropout", type=probability, default=0.1, help="dropout in training (paper: 0.1)")
    parser.add_argument("--query_tokens", type=positive_int, default=8,
                        help="query length in tokens (MS MARCO document dev queries average 5.9 words; about "
                        "1.3 BPE tokens a word)")
    parser.add_argument("--sentence_tokens", type=positive_int, default=25,
                        help="tokens per document sentence (MS MARCO text, BM25 top 20 of TREC DL 2019: 18.6 words "
                        "a sentence)")
    parser.add_argument("--layout", choices=LAYOUTS, default=LAYOUTS[0],
                        help="QDS input layout (qds.inputs; default: official, the official code's)")
    parser.add_argument("--threads", type=positive_int, default=os.cpu_count(), help="torch.set_num_threads")
    parser.add_argument("--seed", type=int, default=0, help="seeds the weights and the token ids")
    parser.add_argument("--timeout", type=positive_float, default=600,
                        help="seconds per measurement (with --isolate)")
    parser.add_argument("--isolate", action="store_true",
                        help="run each measurement in a fresh subprocess (as common.kernels.benchmark; each pays "
                        "the imports, ~5 s) instead of in this process with the peak resident set reset before it")
    parser.add_argument("--output_dir", type=output_folder, default=RESULTS,
                        help="where the CSV, JSONL and plot go")
    parser.add_argument("--overwrite", action="store_true", help="replace existing result files")
    parser.add_argument("--json", action="store_true", help="print one JSON object per measurement per line")
    parser.add_argument("--_one", help=argparse.SUPPRESS)  # internal: one isolated measurement
    args = parser.parse_args(argv)
    for option in ("--lengths", "--systems", "--impls", "--passes"):
        refuse_repeats(option, getattr(args, option[2:]))
    shortest = args.query_tokens + 5
    if min(args.lengths) < shortest:
        parser.error(f"argument --lengths: each must be at least --query_tokens + 5 = {shortest} (<s> query </s> "
                     f"[SOS] token </s>), got {min(args.lengths)}")
    if args.window % 2:
        parser.error(f"argument --window: must be even (Longformer's window spans w / 2 each side), got {args.window}")
    if args.vocab_size <= FIRST_ORDINARY_ID:
        parser.error(f"argument --vocab_size: must be above {FIRST_ORDINARY_ID} (ids 0-{FIRST_ORDINARY_ID - 1} are "
                     f"special), got {args.vocab_size}")
    args.device = resolve_device(args.device)
    for name, value in zip(("num_layers", "hidden_size", "num_heads", "intermediate_size"), SIZES[args.device]):
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.hidden_size % args.num_heads:
        parser.error(f"argument --num_heads: must divide the hidden size {args.hidden_size}, got {args.num_heads}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args._one:
        spec = json.loads(args._one)
        result = measure_guarded(spec["system"], spec["impl"], spec["n"], spec["pass"], spec["args"], spec["device"])
        print(json.dumps(result))
        return 0
    paths = output_paths(args.output_dir, args.device)
    refuse_existing(paths.values(), args.overwrite)
    import torch

    torch.set_num_threads(args.threads)
    settings = {k: getattr(args, k) for k in ("batch_size", "repeats", "warmup", "num_layers", "hidden_size",
                                              "num_heads", "intermediate_size", "window", "vocab_size", "dropout",
                                              "query_tokens", "sentence_tokens", "layout", "threads", "seed",
                                              "timeout")}
    report = sys.stderr if args.json else sys.stdout
    print(f"{args.device}: {args.num_layers} layers, hidden {args.hidden_size}, {args.num_heads} heads, intermediate "
          f"{args.intermediate_size}, window {args.window}, batch {args.batch_size}, {args.threads} threads; query "
          f"{args.query_tokens} tokens, sentences {args.sentence_tokens} tokens, {args.layout} layout", file=report,
          flush=True)
    rows, dense_ms = [], {}
    systems = [s for s in SYSTEMS if s in args.systems]  # dense first: every later row gets its ratio at once
    for n in args.lengths:
        for system in systems:
            density = pattern_density(system, n, args.window, args.query_tokens, args.sentence_tokens, args.layout)
            for impl in [DENSE_IMPL] if system == "dense" else args.impls:
                for pass_ in args.passes:
                    run = measure_isolated if args.isolate else measure_guarded
                    result = run(system, impl, n, pass_, settings, args.device)
                    ms = round(result["ms"], 3) if "ms" in result else None
                    if system == "dense" and ms is not None:
                        dense_ms[(n, pass_)] = ms
                    base = dense_ms.get((n, pass_))
                    ratio = round(ms / base, 4) if ms is not None and base else None
                    row = {"bench": "qds_efficiency", "system": system, "impl": impl, "n": n, "pass": pass_, "ms": ms,
                           "peak_mb": round(result["peak_mb"], 1) if "peak_mb" in result else None,
                           "density": round(density, 6), "ratio_to_dense": ratio,
                           "device": args.device,
                           **{k: settings[k] for k in ("batch_size", "num_layers", "hidden_size", "num_heads",
                                                       "intermediate_size", "window", "layout", "threads")},
                           "skipped": result.get("skipped")}
                    rows.append(row)
                    if args.json:
                        print(json.dumps(row), flush=True)
                    status = f"skipped: {row['skipped']}" if ms is None else f"{ms:.2f} ms/pair"
                    print(f"{system:>14} {impl:>9} n={n} {pass_:>5} {status}", file=sys.stderr, flush=True)
    if all(r["ms"] is None for r in rows):
        print("no measurement succeeded", file=sys.stderr)
        return 1
    write_outputs(rows, paths, args.overwrite)
    print(table(rows), file=report)
    print(f"wrote {', '.join(str(p) for p in paths.values())}", file=report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
