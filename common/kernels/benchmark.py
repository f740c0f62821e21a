"""``python -m common.kernels.benchmark``: time and memory of query-directed sparse attention vs dense attention.

Inputs (1, 12, n, 64), w = 128, the QDS pattern ([CLS] + 20 query tokens + an [SOS] every 25 tokens). Rows: the
`common.kernels` implementations; ``sdpa_masked`` (SDPA, same (n, n) mask); ``sdpa_dense`` (no mask); ``hf_longformer``
(transformers' module, identity projections). Each measurement runs in a fresh process; those known not to run are
skipped with the reason. ``gflops`` = `FLOPS_PER_PAIR` x computed (query, key) pairs x head_dim x heads per second;
``rate_vs_sdpa_dense`` its fraction of dense SDPA's.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from common.benchmarks.fresh_process import answer, measure_in_child
from common.benchmarks.machine import cpu_description
from common.benchmarks.memory import peak_mb
from common.benchmarks.options import benchmark_parser, parse, resolve_device
from common.benchmarks.plots import Line, Panel, draw
from common.benchmarks.session import Session, output_paths, rounded, significant
from common.benchmarks.timing import spread_ms, times_ms
from common.refusals import positive_int, usage_error

if TYPE_CHECKING:
    import torch

IMPLS = ("reference", "portable", "tvm", "flex", "sdpa_masked", "sdpa_dense", "hf_longformer")
PASSES = ("fwd", "fwdbwd")
HEADS, HEAD_DIM, WINDOW, QUERY_LEN, SENTENCE_EVERY = 12, 64, 128, 20, 25
#: Useful floating-point operations per (query, key) pair and head dimension: a multiply-add (2) in each of the
#: forward's QKᵀ and PV, and the backward's dV = PᵀdO, dP = dO·Vᵀ, dQ = dS·K and dK = dSᵀ·Q; not a recomputed
#: forward, the softmax or a kernel's padding.
FLOPS_PER_PAIR = {"fwd": 4, "fwdbwd": 12}
FIELDS = ["bench", "impl", "n", "pass", "ms", "ms_min", "ms_max", "peak_mb", "gflops", "rate_vs_sdpa_dense",
          "density", "device", "heads", "head_dim", "window", "pattern", "threads", "cpu"]


def make_inputs(n: int, device: str, requires_grad: bool, seed: int = 0) -> dict:
    import torch

    from common.kernels.patterns import global_tokens, synthetic_layout

    generator = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, HEADS, n, HEAD_DIM, generator=generator).to(device).requires_grad_(requires_grad)
               for _ in range(3))
    is_global = global_tokens("qds", synthetic_layout(n, QUERY_LEN, SENTENCE_EVERY))[None].to(device)
    return dict(q=q, k=k, v=v, is_global=is_global, window=WINDOW)


def build(impl: str, inputs: dict):
    """A zero-argument callable computing the attention output of `impl` on `inputs`."""
    import torch.nn.functional as F

    q, k, v, is_global = inputs["q"], inputs["k"], inputs["v"], inputs["is_global"]
    if impl in ("reference", "portable", "tvm", "flex"):
        from common.kernels import get_implementation

        attention = get_implementation(impl)
        return lambda: attention(q, k, v, is_global, None, WINDOW, (q, k, v))
    if impl == "sdpa_dense":
        return lambda: F.scaled_dot_product_attention(q, k, v)
    if impl == "sdpa_masked":
        from common.kernels.reference import allowed_keys

        mask = allowed_keys(is_global, None, WINDOW)[:, None]  # (1, 1, N, N)
        return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    if impl == "hf_longformer":
        return _hf_longformer(q, is_global)
    raise ValueError(f"unknown implementation {impl!r}")


def _hf_longformer(x: torch.Tensor, is_global: torch.Tensor):
    import torch
    from torch import nn
    from transformers import LongformerConfig
    from transformers.models.longformer.modeling_longformer import LongformerSelfAttention

    _, heads, n, dim = x.shape
    config = LongformerConfig(hidden_size=heads * dim, num_attention_heads=heads, attention_window=[WINDOW],
                              attention_probs_dropout_prob=0.0)
    module = LongformerSelfAttention(config, layer_id=0).to(x.device)
    for name in ("query", "key", "value", "query_global", "key_global", "value_global"):
        setattr(module, name, nn.Identity())
    if n % WINDOW:
        raise ValueError(f"LongformerSelfAttention needs n to be a multiple of the window ({WINDOW}), got {n}")
    mask = torch.where(is_global, 10000.0, 0.0).to(x.dtype)
    masked = torch.zeros_like(is_global)
    any_global = bool(is_global.any())

    def run():
        hidden = x.transpose(1, 2).reshape(1, n, heads * dim)  # (B, N, H*D), inside the graph of every call
        return module(hidden, attention_mask=mask, is_index_masked=masked, is_index_global_attn=is_global,
                      is_global_attn=any_global)[0]

    return run


def measure(impl: str, n: int, pass_: str, device: str, repeats: int, threads: int | None = None) -> dict:
    """Median milliseconds (with their spread) and peak memory of one (implementation, length, pass) here."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    _step(impl, min(n, 256), pass_, device)()
    step = _step(impl, n, pass_, device)
    if device == "cuda":
        step()
    peak = peak_mb(step, device)
    return {**spread_ms(times_ms(step, repeats, device)), "peak_mb": peak}


def _step(impl: str, n: int, pass_: str, device: str):
    import torch

    inputs = make_inputs(n, device, requires_grad=pass_ == "fwdbwd")
    run = build(impl, inputs)
    leaves = [inputs["q"], inputs["k"], inputs["v"]]

    def step():
        with torch.set_grad_enabled(pass_ == "fwdbwd"):
            out = run()
            if pass_ == "fwdbwd":
                torch.autograd.grad(out.float().sum(), leaves, allow_unused=True)
        return out

    return step


def unmeasurable(impl: str, n: int, device: str, max_quadratic_n: int) -> str | None:
    """Why (`impl`, n) is not measured on `device`, known without trying, or None."""
    if impl == "hf_longformer" and n % WINDOW:
        return f"LongformerSelfAttention needs n to be a multiple of the window ({WINDOW})"
    if (impl == "reference" or (impl == "flex" and device == "cpu")) and n > max_quadratic_n:
        return f"(n, n) scores, above --max_quadratic_n {max_quadratic_n}"
    return None


def useful_gflop(impl: str, n: int, pass_: str) -> float:
    """GFLOP of useful work in one call: n^2 pairs for ``sdpa_dense``, the QDS pattern's for the others."""
    from common.kernels.patterns import global_tokens, nonzeros, synthetic_layout

    qds = global_tokens("qds", synthetic_layout(n, QUERY_LEN, SENTENCE_EVERY))
    pairs = n * n if impl == "sdpa_dense" else nonzeros(qds, WINDOW)
    return FLOPS_PER_PAIR[pass_] * pairs * HEAD_DIM * HEADS / 1e9


def with_rates(row: dict, dense: dict | None) -> dict:
    """`row` with ``gflops`` and ``rate_vs_sdpa_dense`` (over `dense`'s, same n and pass), 4 digits."""
    gflops = useful_gflop(row["impl"], row["n"], row["pass"]) / (row["ms"] / 1000)
    rate = None if dense is None else significant(gflops / dense["gflops"])
    return {**row, "gflops": significant(gflops), "rate_vs_sdpa_dense": rate}


def densities(lengths: list[int]) -> list[dict]:
    from common.kernels.patterns import PATTERNS, density, global_tokens, synthetic_layout

    rows = []
    for n in lengths:
        for pattern in PATTERNS:
            d = density(global_tokens(pattern, synthetic_layout(n, QUERY_LEN, SENTENCE_EVERY)), WINDOW)
            rows.append({"n": n, "pattern": pattern, "density": d, "ideal_speedup": 1 / d})
    return rows


def plot(rows: list[dict], path: Path, overwrite: bool) -> None:
    """Time (top) and peak memory (bottom) against n, one column per pass, one colour per implementation."""
    def lines(pass_: str, value) -> list[Line]:
        return [Line(impl, sorted((r["n"], value(r)) for r in rows if r["impl"] == impl and r["pass"] == pass_),
                     color=f"C{IMPLS.index(impl)}") for impl in IMPLS]

    panels = [Panel(f"{pass_}: time", "", "ms", lines(pass_, lambda r: r["ms"])) for pass_ in PASSES]
    panels += [Panel(f"{pass_}: peak memory", "sequence length n", "MB", lines(pass_, lambda r: max(r["peak_mb"], 0.1)))
               for pass_ in PASSES]
    draw(panels, path, columns=2, size=(5.5, 4), overwrite=overwrite,
         title=f"QDS attention, {HEADS} heads x {HEAD_DIM}, w = {WINDOW}, QDS pattern ({rows[0]['device']})")


def speedups(rows: list[dict], baselines=("sdpa_dense", "hf_longformer")) -> list[str]:
    """Lines 'impl pass n: x.xx times faster than baseline', from measurements of this run."""
    index = {(r["impl"], r["pass"], r["n"]): r["ms"] for r in rows}
    lines = []
    for (impl, pass_, n), ms in sorted(index.items(), key=lambda item: (item[0][1], item[0][0], item[0][2])):
        if impl in baselines:
            continue
        ratios = [f"{index[(b, pass_, n)] / ms:.2f}x vs {b}" for b in baselines if (b, pass_, n) in index]
        if ratios:
            lines.append(f"{impl:>12} {pass_:>6} n={n:<5} " + ", ".join(ratios))
    return lines


def parse_args(argv: list[str] | None):
    """The options, checked, with the device resolved."""
    parser = benchmark_parser(
        "python -m common.kernels.benchmark",
        "Time and peak memory of query-directed sparse attention implementations against dense attention: "
        f"(1, {HEADS}, n, {HEAD_DIM}) inputs, w = {WINDOW}, QDS pattern ({QUERY_LEN} query tokens, an [SOS] every "
        f"{SENTENCE_EVERY} tokens).", results="kernels", writes="bench_<device>.csv, .jsonl and .png", repeats=5,
        repeats_help="timed runs after a warm-up", timeout=600, child=True)
    parser.add_argument("--lengths", type=positive_int, nargs="+", default=[512, 1024, 2048, 4096, 8192], metavar="N",
                        help=f"sequence lengths (hf_longformer: multiples of {WINDOW})")
    parser.add_argument("--impls", nargs="+", default=list(IMPLS), choices=IMPLS, metavar="IMPL",
                        help=f"implementations to run, of {', '.join(IMPLS)}")
    parser.add_argument("--passes", nargs="+", default=list(PASSES), choices=PASSES, help="fwd and/or fwdbwd")
    parser.add_argument("--max_quadratic_n", type=positive_int, default=4096, metavar="N",
                        help="longest n for the implementations that hold (n, n) fp32 scores on this device: "
                        "reference, and flex on CPU (8192 would need ~20 GB for fwd+bwd)")
    args = parse(parser, argv)
    args.device = resolve_device(args.device)
    reasons = {impl: {unmeasurable(impl, n, args.device, args.max_quadratic_n) for n in args.lengths}
               for impl in args.impls}
    if None not in set().union(*reasons.values()):
        usage_error(f"nothing to measure at --lengths {' '.join(map(str, args.lengths))}: "
                    + "; ".join(f"{impl}: {reason}" for impl, why in reasons.items() for reason in why))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args._one:
        return answer(args._one, measure)
    with Session(args, output_paths(args.output_dir, f"bench_{args.device}")) as session:
        import torch

        cpu, threads = cpu_description(), torch.get_num_threads()
        session.say(f"cpu: {cpu}; {threads} threads")
        pattern_densities = densities(args.lengths)
        for row in pattern_densities:
            session.say(f"density n={row['n']:<5} {row['pattern']:<14} {row['density']:.4%}  "
                        f"ideal speed-up {row['ideal_speedup']:.1f}x")
        rows = []
        impls = sorted(args.impls, key=lambda impl: impl != "sdpa_dense")
        for n in args.lengths:
            d = next(r["density"] for r in pattern_densities if (r["n"], r["pattern"]) == (n, "qds"))
            dense = {}
            for impl in impls:
                reason = unmeasurable(impl, n, args.device, args.max_quadratic_n)
                if reason:
                    session.log(f"skipped {impl} n={n}: {reason}")
                    continue
                for pass_ in args.passes:
                    spec = dict(impl=impl, n=n, pass_=pass_, device=args.device, repeats=args.repeats, threads=threads)
                    result = measure_in_child("common.kernels.benchmark", spec, args.timeout)
                    if "skipped" in result:
                        session.log(f"skipped {impl} n={n} {pass_}: {result['skipped']}")
                        continue
                    row = {"bench": "qds_attention", "impl": impl, "n": n, "pass": pass_,
                           **{key: rounded(result[key], 3) for key in ("ms", "ms_min", "ms_max")},
                           "peak_mb": rounded(result["peak_mb"], 1), "density": round(d, 6), "device": args.device,
                           "heads": HEADS, "head_dim": HEAD_DIM, "window": WINDOW, "pattern": "qds",
                           "threads": threads, "cpu": cpu}
                    row = with_rates(row, dense.get(pass_))
                    if impl == "sdpa_dense":
                        dense[pass_] = row
                    rows.append(row)
                    rate = row["rate_vs_sdpa_dense"]
                    session.emit(row, f"{impl:>14} n={n:<5} {pass_:>6} {row['ms']:>10.2f} ms ({row['ms_min']:.2f}-"
                                 f"{row['ms_max']:.2f}) {row['peak_mb']:>9.1f} MB {row['gflops']:>8.1f} GFLOP/s"
                                 + ("" if rate is None else f" {rate:>6.1%} of sdpa_dense"))
        return session.finish(rows, FIELDS, plot=plot, table=lambda rows: "\n".join(speedups(rows)))


if __name__ == "__main__":
    sys.exit(main())
