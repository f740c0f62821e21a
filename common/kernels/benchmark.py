"""``python -m common.kernels.benchmark``: time and memory of query-directed sparse attention vs dense attention.

Every implementation computes the same attention core on the same inputs:
(B, H, N, D) = (1, 12, n, 64), window w = 128, the QDS pattern (QDS-Transformer
Table 4: [CLS] + 20 query tokens + an [SOS] every 25 document tokens). Rows:

- ``reference``, ``portable``, ``tvm``, ``flex``: `common.kernels` implementations;
- ``sdpa_masked``: ``scaled_dot_product_attention`` with the same (n, n) boolean mask
  (global rows share the local projections: the cost of the dense way);
- ``sdpa_dense``: ``scaled_dot_product_attention`` without a mask (full attention);
- ``hf_longformer``: transformers' ``LongformerSelfAttention`` with its six
  projections set to identity, so that only its attention is timed.

For each n and pass (``fwd``, ``fwdbwd``) it reports the median time of
``--repeats`` runs after a warm-up with their minimum and maximum (``ms``,
``ms_min``, ``ms_max``), and the peak memory of the measured call (CUDA:
``max_memory_allocated``; CPU: the peak resident set of a fresh subprocess per
measurement, above its resident set before the call). Rates, so that machines
with different CPUs can be compared: ``gflops`` is the useful work per second,
`FLOPS_PER_PAIR` x the (query, key) pairs the pattern computes (n² for
``sdpa_dense``, the QDS pattern's nonzeros for every other row) x head dimension
x heads, and ``rate_vs_sdpa_dense`` that rate as a fraction of dense SDPA's,
measured first at each n in the same run. The CPU (model, vector extensions,
logical CPUs: `common.benchmarking.cpu_description`) is printed and written in
every row. It prints a table, each pattern's density and ideal speed-up
1/density, and speed-up ratios against ``sdpa_dense`` and ``hf_longformer``
measured in the same run; writes ``results/kernels/bench_<device>.csv`` and
``.png``; with ``--json`` it prints one JSON object per measurement (keys
``bench, impl, n, pass, ms, ms_min, ms_max, peak_mb, gflops,
rate_vs_sdpa_dense``, plus ``density``, the setting and the CPU). A measurement known not to run
(``hf_longformer`` needs n to be a multiple of w; ``reference``, and ``flex`` on
CPU, above ``--max-quadratic-n``) is skipped with the reason, one that fails is
skipped with its error; a run in which nothing can be measured is refused.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from common.benchmarking import (
    DEVICES, cpu_description, cuda_peak_mb, max_rss_mb, refuse_repeats, resolve_device, rss_mb, run_isolated,
    spread_ms, times_ms,
)
from common.refusals import ArgumentParser, output_folder, positive_float, positive_int, usage_error

if TYPE_CHECKING:
    import torch

IMPLS = ("reference", "portable", "tvm", "flex", "sdpa_masked", "sdpa_dense", "hf_longformer")
PASSES = ("fwd", "fwdbwd")
RESULTS = Path(__file__).resolve().parents[2] / "results" / "kernels"
HEADS, HEAD_DIM, WINDOW, QUERY_LEN, SENTENCE_EVERY = 12, 64, 128, 20, 25
#: Useful floating-point operations per (query, key) pair and head dimension: a multiply-add (2) in each of the
#: forward's QKᵀ and PV, and in each of the backward's dV = PᵀdO, dP = dO·Vᵀ, dQ = dS·K and dK = dSᵀ·Q. A
#: recomputed forward, the softmax and the padding a kernel adds are not counted: they are not useful work.
FLOPS_PER_PAIR = {"fwd": 4, "fwdbwd": 12}


def make_inputs(n: int, device: str, requires_grad: bool, seed: int = 0) -> dict:
    import torch

    from common.kernels.patterns import global_tokens, synthetic_layout

    generator = torch.Generator().manual_seed(seed)
    tensors = [torch.randn(1, HEADS, n, HEAD_DIM, generator=generator).to(device) for _ in range(3)]
    for t in tensors:
        t.requires_grad_(requires_grad)
    is_global = global_tokens("qds", synthetic_layout(n, QUERY_LEN, SENTENCE_EVERY))[None].to(device)
    return dict(q=tensors[0], k=tensors[1], v=tensors[2], is_global=is_global, window=WINDOW)


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
        setattr(module, name, nn.Identity())  # time the attention alone, like the other rows
    if n % WINDOW:
        raise ValueError(f"LongformerSelfAttention needs n to be a multiple of the window ({WINDOW}), got {n}")
    mask = torch.where(is_global, 10000.0, 0.0).to(x.dtype)  # LongformerModel's extended mask: +10000 = global
    masked = torch.zeros_like(is_global)
    any_global = bool(is_global.any())

    def run():
        hidden = x.transpose(1, 2).reshape(1, n, heads * dim)  # (B, N, H*D), inside the graph of every call
        return module(hidden, attention_mask=mask, is_index_masked=masked, is_index_global_attn=is_global,
                      is_global_attn=any_global)[0]

    return run


def measure(impl: str, n: int, pass_: str, device: str, repeats: int) -> dict:
    """Median milliseconds and peak memory of one (implementation, length, pass) in this process."""
    # A small call first loads libraries, compiled kernels and thread pools, which are not the call's memory.
    _step(impl, min(n, 256), pass_, device)()
    step = _step(impl, n, pass_, device)

    if device == "cuda":
        step()  # warm-up (compilation, caches)
        peak_mb = cuda_peak_mb(step)
    else:
        before = rss_mb()
        step()  # the measured call: the small warm-up above peaked far lower
        peak_mb = max(max_rss_mb() - before, 0.0)
    return {**spread_ms(times_ms(step, repeats, device)), "peak_mb": peak_mb}


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
        return f"(n, n) scores, above --max-quadratic-n {max_quadratic_n}"
    return None


def measure_isolated(impl: str, n: int, pass_: str, device: str, repeats: int, timeout: float) -> dict:
    """`measure` in a fresh subprocess, so that the process's peak resident set belongs to this call alone."""
    command = [sys.executable, "-m", "common.kernels.benchmark", "--_one", impl, str(n), pass_, device, str(repeats)]
    return run_isolated(command, timeout)


def useful_gflop(impl: str, n: int, pass_: str) -> float:
    """GFLOP of useful work in one call (`FLOPS_PER_PAIR`): full attention for ``sdpa_dense``, the QDS pattern's
    pairs for every other implementation (``sdpa_masked`` computes all n² but only these count)."""
    from common.kernels.patterns import global_tokens, nonzeros, synthetic_layout

    qds = global_tokens("qds", synthetic_layout(n, QUERY_LEN, SENTENCE_EVERY))
    pairs = n * n if impl == "sdpa_dense" else nonzeros(qds, WINDOW)
    return FLOPS_PER_PAIR[pass_] * pairs * HEAD_DIM * HEADS / 1e9


def with_rates(row: dict, dense: dict | None) -> dict:
    """`row` with ``gflops`` (useful GFLOP/s) and ``rate_vs_sdpa_dense`` (that rate over `dense` row's, the same
    n and pass in the same run; None without one)."""
    gflops = useful_gflop(row["impl"], row["n"], row["pass"]) / (row["ms"] / 1000)
    rate = None if dense is None else round(gflops / dense["gflops"], 4)
    return {**row, "gflops": float(f"{gflops:.4g}"), "rate_vs_sdpa_dense": rate}  # 4 digits even below 1 GFLOP/s


def densities(lengths: list[int]) -> list[dict]:
    from common.kernels.patterns import PATTERNS, density, global_tokens, synthetic_layout

    rows = []
    for n in lengths:
        for pattern in PATTERNS:
            d = density(global_tokens(pattern, synthetic_layout(n, QUERY_LEN, SENTENCE_EVERY)), WINDOW)
            rows.append({"n": n, "pattern": pattern, "density": d, "ideal_speedup": 1 / d})
    return rows


def write_outputs(rows: list[dict], device: str, out_dir: Path) -> tuple[Path, Path]:
    from common.io import atomic_write

    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path, png_path = out_dir / f"bench_{device}.csv", out_dir / f"bench_{device}.png"
    fields = ["bench", "impl", "n", "pass", "ms", "ms_min", "ms_max", "peak_mb", "gflops", "rate_vs_sdpa_dense",
              "density", "device", "heads", "head_dim", "window", "pattern", "threads", "cpu"]
    with atomic_write(csv_path, overwrite=True) as f:
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    _plot(rows, device, png_path)
    return csv_path, png_path


def _plot(rows: list[dict], device: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from common.io import atomic_write

    figure, axes = plt.subplots(2, 2, figsize=(11, 8), sharex=True)
    for column, pass_ in enumerate(PASSES):
        for impl in IMPLS:
            points = sorted((r["n"], r["ms"], r["peak_mb"]) for r in rows if r["impl"] == impl and r["pass"] == pass_)
            if points:
                n, ms, mb = zip(*points)
                color = f"C{IMPLS.index(impl)}"  # fixed per implementation: a skipped one shifts no colour
                axes[0, column].plot(n, ms, marker="o", label=impl, color=color)
                axes[1, column].plot(n, [max(m, 0.1) for m in mb], marker="o", label=impl, color=color)
        axes[0, column].set_title(f"{pass_}: time")
        axes[1, column].set_title(f"{pass_}: peak memory")
        axes[0, column].set_ylabel("ms")
        axes[1, column].set_ylabel("MB")
        axes[1, column].set_xlabel("sequence length n")
        for axis in axes[:, column]:
            axis.set_xscale("log", base=2)
            axis.set_yscale("log")
            axis.grid(True, which="both", alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    figure.suptitle(f"QDS attention, {HEADS} heads x {HEAD_DIM}, w = {WINDOW}, QDS pattern ({device})")
    figure.tight_layout()
    with atomic_write(path, "wb", overwrite=True) as f:
        figure.savefig(f, format="png", dpi=110)
    plt.close(figure)


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


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The options, checked (a bad one ends the command in one line, `common.refusals`), with the device resolved.
    A run in which nothing can be measured (`unmeasurable`) is refused; one in which some can skips the rest."""
    parser = ArgumentParser(
        prog="python -m common.kernels.benchmark",
        description="Time and peak memory of query-directed sparse attention implementations against dense "
        f"attention: (1, {HEADS}, n, {HEAD_DIM}) inputs, w = {WINDOW}, QDS pattern ({QUERY_LEN} query tokens, "
        f"an [SOS] every {SENTENCE_EVERY} tokens). Writes results/kernels/bench_<device>.csv and .png.",
    )
    parser.add_argument("--lengths", type=positive_int, nargs="+", default=[512, 1024, 2048, 4096, 8192], metavar="N",
                        help=f"sequence lengths (hf_longformer: multiples of {WINDOW}; default: %(default)s)")
    parser.add_argument("--impls", nargs="+", default=list(IMPLS), choices=IMPLS, metavar="IMPL",
                        help=f"implementations to run (default: all of {', '.join(IMPLS)})")
    parser.add_argument("--passes", nargs="+", default=list(PASSES), choices=PASSES,
                        help="fwd and/or fwdbwd (default: both)")
    parser.add_argument("--device", choices=DEVICES, help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--repeats", type=positive_int, default=5,
                        help="timed runs after a warm-up (default: %(default)s)")
    parser.add_argument("--max-quadratic-n", type=positive_int, default=4096, metavar="N",
                        help="longest n for the implementations that hold (n, n) fp32 scores on this device: "
                        "reference, and flex on CPU (8192 would need ~20 GB for fwd+bwd; default: %(default)s)")
    parser.add_argument("--timeout", type=positive_float, default=600,
                        help="seconds per measurement (default: %(default)s)")
    parser.add_argument("--out-dir", type=output_folder, default=RESULTS,
                        help="where the CSV and plot go (default: %(default)s)")
    parser.add_argument("--json", action="store_true", help="print one JSON object per measurement per line")
    parser.add_argument("--_one", nargs=5, help=argparse.SUPPRESS)  # internal: one isolated measurement
    args = parser.parse_args(argv)
    for option in ("--lengths", "--impls", "--passes"):
        refuse_repeats(option, getattr(args, option[2:]))
    args.device = resolve_device(args.device)
    reasons = {impl: {unmeasurable(impl, n, args.device, args.max_quadratic_n) for n in args.lengths}
               for impl in args.impls}  # where none can run, one reason an implementation at every n
    if None not in set().union(*reasons.values()):
        usage_error(f"nothing to measure at --lengths {' '.join(map(str, args.lengths))}: "
                    + "; ".join(f"{impl}: {reason}" for impl, why in reasons.items() for reason in why))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args._one:
        impl, n, pass_, device, repeats = args._one
        print(json.dumps(measure(impl, int(n), pass_, device, int(repeats))))
        return 0

    import torch

    from common.kernels.patterns import density, global_tokens, synthetic_layout

    rows = []
    report = sys.stderr if args.json else sys.stdout
    cpu = cpu_description()
    print(f"cpu: {cpu}; {torch.get_num_threads()} threads", file=report)
    for row in densities(args.lengths):
        print(f"density n={row['n']:<5} {row['pattern']:<14} {row['density']:.4%}  "
              f"ideal speed-up {row['ideal_speedup']:.1f}x", file=report)
    # Dense SDPA first at each n: every other row's rate is a fraction of its rate.
    impls = sorted(args.impls, key=lambda impl: impl != "sdpa_dense")
    for n in args.lengths:
        d = density(global_tokens("qds", synthetic_layout(n, QUERY_LEN, SENTENCE_EVERY)), WINDOW)
        dense = {}
        for impl in impls:
            reason = unmeasurable(impl, n, args.device, args.max_quadratic_n)
            if reason:
                print(f"skipped {impl} n={n}: {reason}", file=sys.stderr)
                continue
            for pass_ in args.passes:
                result = measure_isolated(impl, n, pass_, args.device, args.repeats, args.timeout)
                if "skipped" in result:
                    print(f"skipped {impl} n={n} {pass_}: {result['skipped']}", file=sys.stderr)
                    continue
                row = {"bench": "qds_attention", "impl": impl, "n": n, "pass": pass_,
                       **{key: round(result[key], 3) for key in ("ms", "ms_min", "ms_max")},
                       "peak_mb": round(result["peak_mb"], 1), "density": round(d, 6), "device": args.device,
                       "heads": HEADS, "head_dim": HEAD_DIM, "window": WINDOW, "pattern": "qds",
                       "threads": torch.get_num_threads(), "cpu": cpu}
                row = with_rates(row, dense.get(pass_))
                if impl == "sdpa_dense":
                    dense[pass_] = row
                rows.append(row)
                if args.json:
                    print(json.dumps(row), flush=True)
                else:
                    rate = row["rate_vs_sdpa_dense"]
                    rate = "" if rate is None else f" {rate:>6.1%} of sdpa_dense"
                    print(f"{impl:>14} n={n:<5} {pass_:>6} {row['ms']:>10.2f} ms "
                          f"({row['ms_min']:.2f}-{row['ms_max']:.2f}) {row['peak_mb']:>9.1f} MB "
                          f"{row['gflops']:>8.1f} GFLOP/s{rate}", flush=True)
    if not rows:
        print("no measurement succeeded", file=sys.stderr)
        return 1
    csv_path, png_path = write_outputs(rows, args.device, args.out_dir)
    print("\n".join(speedups(rows)), file=report)
    print(f"wrote {csv_path} and {png_path}", file=report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
