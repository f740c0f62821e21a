"""``python -m conformer_kernel.benchmark``: peak memory of a training step with Transformer vs Conformer layers as
the document length n grows (Mitra et al., TREC 2020 DL, RQ2, Figure 2: quadratic for TK, linear for CK).

One training step (forward, RankNet loss, backward, Adam) of NDRM1 with ``encoder="transformer"`` (``tk``, Eq. 1) or
``"conformer"`` (``ck``, Eq. 2) on ``--queries`` x ``--docs`` documents of exactly n random terms. ``peak_mb`` is
measured in a fresh process per (impl, n) after one untimed full-size step (the step's own working memory); on CPU
the child fixes glibc's mmap threshold so freed tensors leave the resident set, and a step whose `estimate_mb` exceeds
``--memory_fraction`` of MemAvailable is skipped. Details: docs/conformer_kernel_benchmark.md.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from common.benchmarks.fits import fit_value, polyfit
from common.benchmarks.fresh_process import answer, measure_in_child
from common.benchmarks.memory import MB, available_mb, limit_data_segment, peak_mb
from common.benchmarks.options import benchmark_parser, fraction, parse, probability, resolve_device
from common.benchmarks.plots import Line, Panel, draw
from common.benchmarks.session import Session, output_paths, rounded, text_table
from common.benchmarks.timing import median_ms, training_step
from common.refusals import nonnegative_int, positive_int, usage_error
from conformer_kernel import hidden_size

ENCODERS = {"tk": "transformer", "ck": "conformer"}
IMPLS = tuple(ENCODERS)
REPORT_N = 4000  # the length at which the closing note gives the TK/CK ratio (the paper's document limit)
FIELDS = ["bench", "impl", "n", "pass", "ms", "peak_mb", "device", "queries", "docs", "estimate_mb", "state_mb",
          "hidden", "heads", "layers", "conv_window", "query_terms", "vocab_size", "threads", "mmap_threshold",
          "skipped"]
SETTINGS = ("queries", "docs", "query_terms", "vocab_size", "hidden_size", "num_heads", "num_layers", "conv_window",
            "kernels", "pool_window", "pool_stride", "dropout", "repeats", "threads", "seed", "memory_fraction",
            "timeout", "mmap_threshold")
#: glibc ignores a MALLOC_MMAP_THRESHOLD_ above this (HEAP_MAX_SIZE / 2 on 64-bit), keeping its dynamic threshold.
MAX_MMAP_THRESHOLD = 32 * MB


def make_batch(n: int, queries: int, docs: int, query_terms: int, vocab_size: int, seed: int):
    """`Features` of `queries` x `docs` documents of exactly n terms, and RankNet labels (first document relevant)."""
    import torch

    from conformer_kernel.model import Features

    generator = torch.Generator().manual_seed(seed)
    query_ids = torch.randint(1, vocab_size, (queries, query_terms), generator=generator)  # 0 = UNK/padding
    doc_ids = torch.randint(1, vocab_size, (queries, docs, n), generator=generator)
    features = Features(query_ids, torch.ones(queries, query_terms), torch.ones(queries, query_terms), doc_ids,
                        torch.ones(queries, docs, n), torch.zeros(queries, docs, query_terms),
                        torch.full((queries, docs), float(n)))  # tf 0, |d| = n
    labels = torch.zeros(queries, docs)
    labels[:, 0] = 1.0
    return features, labels


def build_model(impl: str, n: int, settings: dict):
    """NDRM1 with Transformer (``tk``) or Conformer (``ck``) layers, seeded, in train mode; `settings` over the
    ranker's defaults, documents of exactly n terms: ``doc_padding="zeroed"``, no padding read, as the official code
    with max_terms_doc = n (where "official" would add the convolution's reach, 30 padded positions)."""
    import inspect

    import torch

    from conformer_kernel.model import build_ranker
    from conformer_kernel.ranker import ConformerKernelRanker

    defaults = inspect.signature(ConformerKernelRanker).parameters
    torch.manual_seed(settings["seed"])
    sizes = ("hidden_size", "num_heads", "num_layers", "dropout", "kernels", "pool_window", "pool_stride")
    model = build_ranker("ndrm1", settings["vocab_size"], ENCODERS[impl], settings["conv_window"],
                         **{k: settings[k] for k in sizes}, sigma=defaults["sigma"].default,
                         identity_init=defaults["identity_init"].default, doc_padding="zeroed",
                         max_doc_terms=max(n, 4000))  # the positional table must hold n
    return model.train()


def estimate_mb(impl: str, n: int, settings: dict) -> float:
    """Predicted working memory of one training step in bytes: ``tk`` B·heads·n²·4·(3·layers + 1) (three float32
    (B, heads, n, n) tensors per layer kept for backward, the scores at the peak); ``ck`` B·n·hidden·4·32·layers
    (empirical)."""
    documents, layers = settings["queries"] * settings["docs"], settings["num_layers"]
    if impl == "tk":
        return documents * settings["num_heads"] * n * n * 4 * (3 * layers + 1) / MB
    return documents * n * settings["hidden_size"] * 4 * 32 * layers / MB


def measure(impl: str, n: int, settings: dict, device: str) -> dict:
    """``ms`` and ``peak_mb`` of the timed training steps of `impl` at length n, in this process."""
    import torch

    from conformer_kernel.ranker import ranknet_loss

    torch.set_num_threads(settings["threads"])
    model = build_model(impl, n, settings).to(device)
    step = training_step(model, lambda batch: ranknet_loss(model(batch[0]), batch[1]), lr=1e-4)
    sizes = (settings[k] for k in ("queries", "docs", "query_terms", "vocab_size", "seed"))
    batch = [x.to(device) for x in make_batch(n, *sizes)]  # features, labels
    step(batch)  # warm-up: Adam's state, thread pools, allocator caches
    state_mb = sum(p.numel() * p.element_size() for p in model.parameters()) * 3 / MB  # weights + 2 Adam moments
    timed = {}
    peak = peak_mb(lambda: timed.setdefault("ms", median_ms(lambda: step(batch), settings["repeats"], device)),
                   device)
    return {"ms": timed["ms"], "peak_mb": peak, "state_mb": state_mb}


def measure_alone(impl: str, n: int, settings: dict, device: str) -> dict:
    """`measure` in the fresh process of `measure_isolated`, on CPU with its data segment limited first."""
    if device == "cpu":
        limit_data_segment(settings["memory_fraction"])
    return measure(impl, n, settings, device)


def measure_isolated(impl: str, n: int, settings: dict, device: str) -> dict:
    """`measure_alone` in a fresh process, with glibc's mmap threshold fixed (``--mmap_threshold``, 0: glibc's)."""
    threshold = settings["mmap_threshold"]
    return measure_in_child("conformer_kernel.benchmark", dict(impl=impl, n=n, settings=settings, device=device),
                            settings["timeout"], {"MALLOC_MMAP_THRESHOLD_": threshold} if threshold else None)


def skip_reason(impl: str, n: int, settings: dict, device: str) -> str | None:
    """Why (impl, n) is not attempted on this CPU machine, or None (CUDA: never; its OOM is the skip)."""
    need, free = estimate_mb(impl, n, settings), available_mb()
    if device == "cpu" and need > settings["memory_fraction"] * free:
        return (f"estimated {need / 1024:.1f} GiB of working memory, above {settings['memory_fraction']:.0%} of "
                f"the {free / 1024:.1f} GiB available (MemAvailable)")
    return None


def fits(rows: list[dict]) -> dict:
    """`polyfit` of peak_mb on n: ``ck`` linear, ``tk`` quadratic; None with too few points."""
    return {impl: polyfit([(r["n"], r["peak_mb"]) for r in rows if r["impl"] == impl and r["peak_mb"] is not None],
                          degree) for impl, degree in (("ck", 1), ("tk", 2))}


def ratios(rows: list[dict], fitted: dict) -> list[dict]:
    """TK/CK peak-memory ratio at every n with a CK measurement: measured where TK was measured too, else the
    TK quadratic fit over the measured CK (``extrapolated``)."""
    peaks = {(r["impl"], r["n"]): r["peak_mb"] for r in rows if r["peak_mb"] is not None}
    out = []
    for n in sorted({r["n"] for r in rows}):
        ck, tk = peaks.get(("ck", n)), peaks.get(("tk", n))
        if ck and (tk is not None or fitted.get("tk") is not None):
            tk, extrapolated = (tk, False) if tk is not None else (fit_value(fitted["tk"], n), True)
            out.append({"n": n, "tk_mb": tk, "ck_mb": ck, "ratio": tk / ck, "extrapolated": extrapolated})
    return out


def closing_note(rows: list[dict], fitted: dict, at: int = REPORT_N) -> str:
    """The TK/CK ratio at n = `at`: measured, or from the TK fit (saying why TK was not measured)."""
    entry = next((r for r in ratios(rows, fitted) if r["n"] == at), None)
    if entry is None:
        return f"TK/CK peak-memory ratio at n = {at}: not available (CK not measured at {at}, or no TK fit)"
    if not entry["extrapolated"]:
        return (f"TK/CK peak-memory ratio at n = {at}: {entry['ratio']:.1f}x measured "
                f"({entry['tk_mb']:.0f} MB vs {entry['ck_mb']:.0f} MB)")
    why = next((r["skipped"] for r in rows if r["impl"] == "tk" and r["n"] == at and r.get("skipped")), "not run")
    return (f"TK/CK peak-memory ratio at n = {at}: ~{entry['ratio']:.1f}x extrapolated (TK's quadratic fit gives "
            f"{entry['tk_mb']:.0f} MB vs {entry['ck_mb']:.0f} MB measured for CK; TK skipped: {why})")


def plot(rows: list[dict], fitted: dict, path: Path, overwrite: bool) -> None:
    """Peak MB against n for both encoders with their fits: up to n = 4000 on linear axes, and every length log-log."""
    import numpy as np

    at = {r["n"]: f"TK/CK {r['ratio']:.1f}x" for r in ratios(rows, fitted) if r["n"] == REPORT_N}
    lengths = sorted({r["n"] for r in rows})
    shown = [n for n in lengths if n <= REPORT_N]
    panels = []
    for title, ns, log in (("n <= 4000, linear axes", shown if len(shown) > 1 else lengths, ""),
                           ("every length, log-log", lengths, "xy")):
        lines, grid = [], np.linspace(min(ns), max(ns), 200)
        for impl, color, label in (("tk", "C3", "Transformer (TK)"), ("ck", "C0", "Conformer (CK)")):
            fit, mine = fitted.get(impl), [r for r in rows if r["impl"] == impl and r["n"] in ns]
            note = {n: text for n, text in at.items() if impl == "tk" and not log}  # the ratio beside TK's point
            lines.append(Line(label, [(r["n"], r["peak_mb"], note.get(r["n"])) for r in mine
                                      if r["peak_mb"] is not None], "o", color))
            if fit is not None:
                top = max(fit["lengths"])
                lines += [Line(f"{impl} fit", [(x, fit_value(fit, x)) for x in grid if x <= top], "-", color),
                          Line(f"{impl} fit, extrapolated", [(x, fit_value(fit, x)) for x in grid if x >= top], "--",
                               color),
                          Line(f"{impl} skipped (fit value)", [(r["n"], fit_value(fit, r["n"]), note.get(r["n"]))
                                                               for r in mine if r["peak_mb"] is None], "x", color)]
        panels.append(Panel(title, "document length n (terms)", "peak memory of a training step (MB)", lines, log))
    first = rows[0]
    draw(panels, path, overwrite=overwrite, title=f"NDRM1 training step, {first['layers']} layers, hidden "
         f"{first['hidden']}, {first['heads']} heads, {first['queries']} query x {first['docs']} docs, "
         f"{first['device']}: peak memory above the step's start")


def report(rows: list[dict], fitted: dict) -> str:
    """Measurements per n side by side with the TK/CK ratio, the skips, the fits and the closing note."""
    peak = {(r["impl"], r["n"]): r for r in rows}
    ratio = {r["n"]: f"{r['ratio']:.2f}" + ("*" if r["extrapolated"] else "") for r in ratios(rows, fitted)}
    table = [{"n": n, **{f"{impl} {what}": peak.get((impl, n), {}).get(key) for impl in IMPLS
                         for what, key in (("MB", "peak_mb"), ("ms", "ms"))}, "tk/ck": ratio.get(n)}
             for n in sorted({r["n"] for r in rows})]
    lines = [text_table(table, [(k, k, ".1f" if "MB" in k else ".0f" if "ms" in k else "") for k in table[0]]),
             "(* from TK's quadratic fit: TK skipped at that n)"]
    lines += [f"skipped {r['impl']} n={r['n']}: {r['skipped']}" for r in rows if r.get("skipped")]
    for impl, fit in fitted.items():
        c = fit and fit["coefficients"]
        lines.append(f"fit {impl}: " + ("too few measurements" if fit is None else f"peak_mb = {c[0]:.1f} + "
                     f"{c[1]:.4g}·n" + (f" + {c[2]:.4g}·n²" if len(c) > 2 else "") + f"  (R² {fit['r2']:.4f}, n = "
                     f"{min(fit['lengths'])}..{max(fit['lengths'])})"))
    return "\n".join([*lines, closing_note(rows, fitted)])


def parse_args(argv: list[str] | None):
    """The options, checked (a bad one ends the command in one line), with the device and ``--repeats`` resolved."""
    parser = benchmark_parser(
        "python -m conformer_kernel.benchmark", __doc__.split("\n\n")[0], results="conformer_kernel",
        writes="memory.csv/.jsonl/.png and memory_fits.json (memory_cuda.* on CUDA)", repeats=None,
        repeats_help="timed steps, the median is reported (default: 1 on CPU, 5 on CUDA)", threads=os.cpu_count(),
        seed="seeds the weights and the token ids", timeout=1800, child=True)
    add = parser.add_argument
    add("--lengths", type=positive_int, nargs="+", default=list(range(500, 4001, 500)), metavar="N",
        help="document lengths in terms, every document exactly n terms")
    add("--impls", nargs="+", default=list(IMPLS), choices=IMPLS, help="tk: Transformer layers; ck: Conformer layers")
    add("--queries", type=positive_int, default=1, help="queries per batch (paper: 32)")
    add("--docs", type=positive_int, default=2,
        help="documents per query, the first one relevant (paper: 4; 32 x 4 does not fit a 24 GiB CPU machine for tk)")
    add("--query_terms", type=positive_int, default=20, help="terms per query")
    add("--vocab_size", type=positive_int, default=10_000, help="vocabulary of the random ids, at least 2 (0: padding)")
    add("--hidden_size", type=positive_int, default=hidden_size(128), help="hidden size (the paper's: IN || OUT of "
        "its 128-dimensional word2vec)")
    add("--num_heads", type=positive_int, default=32, help="attention heads = convolution groups, dividing the hidden "
        "size")
    add("--num_layers", type=positive_int, default=2, help="encoder layers")
    add("--conv_window", type=positive_int, default=31, help="grouped-convolution window, odd, ck only")
    add("--kernels", type=positive_int, default=10, help="RBF kernels")
    add("--pool_window", type=positive_int, default=300, help="kernel-pooling window")
    add("--pool_stride", type=positive_int, default=100, help="kernel-pooling stride")
    add("--dropout", type=probability, default=0.2, help="dropout, training mode")
    add("--memory_fraction", type=fraction, default=0.85, help="CPU: skip a measurement whose estimate exceeds this "
        "share of MemAvailable, and limit each child's data segment to it")
    add("--mmap_threshold", type=nonnegative_int, default=128 * 1024, help="bytes: glibc's MALLOC_MMAP_THRESHOLD_ in "
        f"each child, so that the resident set follows the live tensors (0: glibc's dynamic one; at most "
        f"{MAX_MMAP_THRESHOLD})")
    args = parse(parser, argv)
    if args.vocab_size < 2:
        usage_error(f"argument --vocab_size: must be at least 2 (id 0 is padding), got {args.vocab_size}")
    if args.hidden_size % args.num_heads:
        usage_error(f"argument --num_heads: must divide --hidden_size ({args.hidden_size}), got {args.num_heads}")
    if "ck" in args.impls and args.conv_window % 2 == 0:
        usage_error(f"argument --conv_window: must be odd (the convolution keeps the document's length), "
                    f"got {args.conv_window}")
    if args.mmap_threshold > MAX_MMAP_THRESHOLD:
        usage_error(f"argument --mmap_threshold: must be at most {MAX_MMAP_THRESHOLD} (glibc ignores a larger one), "
                    f"got {args.mmap_threshold}")
    args.device = resolve_device(args.device)
    args.repeats = args.repeats or (1 if args.device == "cpu" else 5)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args._one:
        return answer(args._one, measure_alone)
    stem = "memory" if args.device == "cpu" else f"memory_{args.device}"
    paths = {**output_paths(args.output_dir, stem), "fits": args.output_dir / f"{stem}_fits.json"}
    with Session(args, paths) as session:
        settings = {k: getattr(args, k) for k in SETTINGS}
        session.say(f"NDRM1 training step on {args.device}: " + ", ".join(f"{k} {settings[k]}" for k in SETTINGS)
                    + f"; MemAvailable {available_mb() / 1024:.1f} GiB")
        rows = []
        for n in args.lengths:
            for impl in [i for i in IMPLS if i in args.impls]:
                reason = skip_reason(impl, n, settings, args.device)
                result = {"skipped": reason} if reason else measure_isolated(impl, n, settings, args.device)
                row = {"bench": "conformer_kernel_memory", "impl": impl, "n": n, "pass": "train",
                       "ms": rounded(result.get("ms"), 1), "peak_mb": rounded(result.get("peak_mb"), 1),
                       "device": args.device, "queries": args.queries, "docs": args.docs,
                       "estimate_mb": round(estimate_mb(impl, n, settings), 1),
                       "state_mb": rounded(result.get("state_mb"), 1), "hidden": args.hidden_size,
                       "heads": args.num_heads, "layers": args.num_layers,
                       **{k: settings[k] for k in ("conv_window", "query_terms", "vocab_size", "threads",
                                                   "mmap_threshold")},
                       **({"skipped": result["skipped"]} if "skipped" in result else {})}
                rows.append(row)
                session.emit(row, f"{impl} n={n}: " + (f"skipped: {row['skipped']}" if "skipped" in row
                                                       else f"{row['peak_mb']:.1f} MB, {row['ms']:.0f} ms"))
        fitted = fits(rows)
        document = {"fits": fitted, "ratios": ratios(rows, fitted), "note": closing_note(rows, fitted)}
        return session.finish(rows, FIELDS, plot=lambda rows, path, overwrite: plot(rows, fitted, path, overwrite),
                              table=lambda rows: report(rows, fitted), documents={"fits": document})


if __name__ == "__main__":
    sys.exit(main())
