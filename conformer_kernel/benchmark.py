"""``python -m conformer_kernel.benchmark``: training-step memory of Transformer vs Conformer layers (Figure 2).

Conformer-Kernel (Mitra et al., TREC 2020 DL), RQ2 "Does CK-QTI improve train-time GPU memory
requirement over TKL?": Figure 2 plots the peak GPU memory of one training configuration of the
proposed architecture with Transformer (TK) and with Conformer (CK) layers, "keeping all other
hyperparameters and architecture choices fixed", as the document length grows; memory grows
linearly with n for the Conformer and quadratically for the Transformer. The figure's numbers are
not in the text, only the shapes of the curves. This command measures the same comparison:

- Model: NDRM1 (`conformer_kernel.model.build_ranker("ndrm1", ...)`), the part of the rankers whose
  memory depends on the encoder: NDRM2 has no encoder and NDRM3 adds to NDRM1 only NDRM2's
  O(Q·D·Tq) explicit-match scores and a BatchNorm over them. ``impl`` ``tk`` is
  ``encoder="transformer"`` (standard dot-product attention, Eq. 1, no convolution), ``ck`` is
  ``encoder="conformer"`` (grouped convolution + separable attention, Eq. 2). Paper sizes (Sec. 4):
  hidden 256, 32 heads, 2 layers, convolution window 31, 10 kernels, kernel-pooling window 300 and
  stride 100, dropout 0.2; ``max_doc_terms`` = max(n, 4000) (the positional table must hold n).
- Step (``pass`` = ``train``): forward, RankNet loss (`conformer_kernel.loss.ranknet_loss`, the
  first document of each query labelled relevant), backward, Adam step, gradients set to None.
- Batch: the same for both: ``--queries`` queries of ``--query_terms`` (20) terms with ``--docs``
  documents each of exactly n terms (no padding), random token ids from ``--seed``. The default is
  1 query x 2 documents (one RankNet pair): the paper's 32 x 4 does not fit a 24 GiB CPU machine
  for TK (its attention alone would need ~64x the memory of the default batch).

Memory, ``peak_mb``:

- CPU: the rise of the peak resident set during the measured step(s) above the resident set just
  before them (`common.benchmarking.reset_peak_rss` + `peak_rss_mb`), in a fresh subprocess per
  (impl, n) (`run_isolated`), after one untimed full-size warm-up step. The warm-up makes the
  measured step the steady state of training: Adam's moments, the thread pools and the
  allocator's caches already exist, and freed heap pages are returned (``malloc_trim``) before the
  peak is reset, so the rise is the step's own working memory (activations saved for backward,
  gradients, temporaries). The parameters and Adam's two moments (``state_mb``, computed) exist
  before the step and are outside it; a whole-process peak, as the paper's, is about
  ``peak_mb + state_mb``.
  Each child runs with glibc's ``MALLOC_MMAP_THRESHOLD_`` fixed (``--mmap_threshold``, 128 KiB):
  with glibc's default dynamic threshold, freed blocks of up to 32 MB (CK's activations are ~8 MB at
  n = 4000) stay in the heap and are reused or not depending on fragmentation, which made CK's peak
  40-90% higher than with the fixed threshold and vary by up to 20% from run to run (522-601 MB
  at n = 4000, against 362.2-362.7 MB in four runs with it); with it, every tensor is its own
  mapping, returned when freed, and the resident set follows the live tensors, as CUDA's
  allocator statistics do.
- CUDA (``--device cuda``): `common.benchmarking.cuda_peak_mb` (allocator peak above the memory
  allocated before the step), after the same warm-up step, also in a fresh subprocess.

``ms`` is `common.benchmarking.median_ms` of ``--repeats`` steps (default 1 on CPU, 5 on CUDA);
the peak is taken over those same steps (identical steps: the peak of one).

A measurement that would not fit is skipped with the reason, not attempted: TK's attention keeps
per layer three (B, heads, n, n) fp32 tensors for backward (the softmax output, the dropout mask
and the dropped-out probabilities: on CPU dropout keeps its mask as a float tensor, on CUDA the
fused kernel a 1-byte one, so there the estimate is an upper bound), and at the
peak, in the last layer's forward, one more is alive (the masked scores, still referenced while
the softmax and the dropout run), so ``estimate_mb`` = B·heads·n²·4 bytes·(3·layers + 1) with
B = queries x docs (28 bytes per B·heads·n² element at 2 layers; the measured n² coefficient of
the TK fit on CPU is the same). It is compared with ``--memory_fraction`` of MemAvailable
(/proc/meminfo) before each child starts (CPU only; on CUDA an out-of-memory error is the skip).
CK's estimate, B·n·hidden·4 bytes·32·layers, is an empirical bound of its linear activations
(0.125 MB per term at the default sizes and batch; measured on CPU: 0.088), never the binding
one. Each child also limits its own data segment (RLIMIT_DATA) to its current size plus that
fraction of MemAvailable, so an estimate that is too low ends in a clean allocation error (a
skipped row), not the kernel's OOM killer; a child that fails or passes ``--timeout`` also
becomes a skipped row.

Outputs in ``--output_dir`` (default results/conformer_kernel): ``memory.csv``, ``memory.jsonl``,
``memory.png`` and ``memory_fits.json`` (on CUDA ``memory_cuda.*``), written atomically; existing
files are refused without ``--overwrite``. Fits (numpy.polyfit): ``ck``: peak_mb = a + b·n,
``tk``: peak_mb = a + b·n + c·n²; the TK/CK ratio at each n (measured where both are; from the TK
fit where TK was skipped, marked as extrapolated), and the ratio at n = 4000 closes the report.
With ``--json`` one JSON object per measurement per line on stdout (keys ``bench``
= "conformer_kernel_memory", ``impl``, ``n``, ``pass``, ``ms``, ``peak_mb``, ``device``, ``queries``,
``docs``, the setting, and ``skipped`` when skipped); everything else goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from common.benchmarking import (
    DEVICES, cuda_peak_mb, fraction, max_rss_mb, median_ms, peak_rss_mb, probability, refuse_existing,
    refuse_repeats, reset_peak_rss, resolve_device, rss_mb, run_isolated, write_rows,
)
from common.refusals import ArgumentParser, nonnegative_int, output_folder, positive_float, positive_int

if TYPE_CHECKING:
    import torch

BENCH = "conformer_kernel_memory"
ENCODERS = {"tk": "transformer", "ck": "conformer"}
IMPLS = tuple(ENCODERS)
PASS = "train"
RESULTS = Path(__file__).resolve().parents[1] / "results" / "conformer_kernel"
DEFAULT_LENGTHS = list(range(500, 4001, 500))
REPORT_N = 4000  # the length at which the closing note gives the TK/CK ratio (the paper's document limit)
PAPER_MAX_DOC_TERMS = 4000
FIELDS = ["bench", "impl", "n", "pass", "ms", "peak_mb", "device", "queries", "docs", "estimate_mb", "state_mb",
          "hidden", "heads", "layers", "conv_window", "query_terms", "vocab_size", "threads", "mmap_threshold",
          "skipped"]
MB = 2**20
#: glibc ignores a MALLOC_MMAP_THRESHOLD_ above this (HEAP_MAX_SIZE / 2 on 64-bit), keeping its dynamic threshold.
MAX_MMAP_THRESHOLD = 32 * MB


# --------------------------------------------------------------------------- inputs, model, estimate


def make_batch(n: int, queries: int, docs: int, query_terms: int, vocab_size: int, seed: int):
    """`Features` of `queries` x `docs` documents of exactly n terms, and RankNet labels (first document relevant)."""
    import torch

    from conformer_kernel.model import Features

    generator = torch.Generator().manual_seed(seed)
    query_ids = torch.randint(1, vocab_size, (queries, query_terms), generator=generator)  # 0 = UNK/padding
    doc_ids = torch.randint(1, vocab_size, (queries, docs, n), generator=generator)
    features = Features(query_ids=query_ids, query_mask=torch.ones(queries, query_terms),
                        query_idf=torch.ones(queries, query_terms), doc_ids=doc_ids,
                        doc_mask=torch.ones(queries, docs, n), tf=torch.zeros(queries, docs, query_terms),
                        doc_length=torch.full((queries, docs), float(n)))
    labels = torch.zeros(queries, docs)
    labels[:, 0] = 1.0
    return features, labels


def build_model(impl: str, n: int, settings: dict) -> torch.nn.Module:
    """NDRM1 with Transformer (``tk``) or Conformer (``ck``) layers, seeded, in train mode."""
    import torch

    from conformer_kernel.model import build_ranker

    torch.manual_seed(settings["seed"])
    model = build_ranker("ndrm1", settings["vocab_size"], encoder=ENCODERS[impl],
                         conv_window=settings["conv_window"], hidden=settings["hidden"], heads=settings["heads"],
                         layers=settings["layers"], dropout=settings["dropout"], kernels=settings["kernels"],
                         pool_window=settings["pool_window"], pool_stride=settings["pool_stride"],
                         max_doc_terms=max(n, PAPER_MAX_DOC_TERMS),
                         # Documents of exactly n terms, as the official code with max_terms_doc = n: no padding
                         # to read, where "official" would add the convolution's reach (30 padded positions).
                         doc_padding="zeroed")
    return model.train()


def estimate_mb(impl: str, n: int, settings: dict) -> float:
    """Predicted working memory of one training step, from its dominant term (see the module docstring).

    ``tk``: B·heads·n² fp32 elements times (3 saved tensors per layer + the masked scores alive at the peak);
    ``ck``: B·n·hidden fp32 elements times 32 per layer, an empirical bound of its linear activations.
    """
    documents = settings["queries"] * settings["docs"]
    layers = settings["layers"]
    if impl == "tk":
        return documents * settings["heads"] * n * n * 4 * (3 * layers + 1) / MB
    return documents * n * settings["hidden"] * 4 * 32 * layers / MB


def available_mb() -> float:
    """MemAvailable of /proc/meminfo (memory the kernel can give without swapping), in MB."""
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:")) / 1024  # kB


def _vm_data_bytes() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmData:")) * 1024


def limit_data_segment(fraction: float) -> None:
    """RLIMIT_DATA = this process's data segment now + `fraction` of MemAvailable: an allocation beyond it
    fails with an error in this process instead of waking the OOM killer."""
    import resource

    limit = _vm_data_bytes() + int(fraction * available_mb() * MB)
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))


# --------------------------------------------------------------------------- one measurement


def make_step(model, features, labels, optimizer):
    """One training step: forward, RankNet loss, backward, Adam step, gradients dropped."""
    from conformer_kernel.loss import ranknet_loss

    def step():
        loss = ranknet_loss(model(features), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    return step


def measure(impl: str, n: int, settings: dict, device: str) -> dict:
    """``ms`` and ``peak_mb`` of one training step of `impl` at length n, in this process (see the docstring)."""
    import torch

    torch.set_num_threads(settings["threads"])
    model = build_model(impl, n, settings).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    features, labels = make_batch(n, settings["queries"], settings["docs"], settings["query_terms"],
                                  settings["vocab_size"], settings["seed"])
    features, labels = features.to(device), labels.to(device)
    step = make_step(model, features, labels, optimizer)
    step()  # warm-up: Adam's state, thread pools, allocator caches
    state_mb = sum(p.numel() * p.element_size() for p in model.parameters()) * 3 / MB  # weights + 2 Adam moments
    timed = {}

    def timed_steps():
        timed["ms"] = median_ms(step, settings["repeats"], device)

    if device == "cuda":
        peak_mb = cuda_peak_mb(timed_steps)
    else:
        reset = reset_peak_rss()
        before = rss_mb()
        timed_steps()
        peak_mb = max((peak_rss_mb() if reset else max_rss_mb()) - before, 0.0)
    return {"ms": timed["ms"], "peak_mb": peak_mb, "state_mb": state_mb}


def measure_guarded(impl: str, n: int, settings: dict, device: str) -> dict:
    """`measure`, with a failure (an allocation beyond the limit, CUDA out of memory) as {"skipped": reason}."""
    try:
        return measure(impl, n, settings, device)
    except (RuntimeError, MemoryError) as error:  # torch.OutOfMemoryError is a RuntimeError
        return {"skipped": f"{type(error).__name__}: {error}".splitlines()[0][:300]}


def measure_isolated(impl: str, n: int, settings: dict, device: str) -> dict:
    """`measure` in a fresh subprocess (``--_one``): the peak resident set is then this measurement's alone."""
    spec = json.dumps({"impl": impl, "n": n, "device": device, "settings": settings})
    command = [sys.executable, "-m", "conformer_kernel.benchmark", "--_one", spec]
    if settings["mmap_threshold"] > 0:  # glibc: a fixed threshold, so that every larger block is unmapped when freed
        command = ["env", f"MALLOC_MMAP_THRESHOLD_={settings['mmap_threshold']}", *command]
    result = run_isolated(command, settings["timeout"])
    if result.get("skipped", "").startswith("over the"):
        result["skipped"] += " (--timeout)"
    return result


def skip_reason(impl: str, n: int, settings: dict, device: str) -> str | None:
    """Why (impl, n) is not attempted on this CPU machine, or None (CUDA: never; its OOM is the skip)."""
    if device != "cpu":
        return None
    need, free = estimate_mb(impl, n, settings), available_mb()
    if need > settings["memory_fraction"] * free:
        return (f"estimated {need / 1024:.1f} GiB of working memory, above {settings['memory_fraction']:.0%} of "
                f"the {free / 1024:.1f} GiB available (MemAvailable)")
    return None


# --------------------------------------------------------------------------- fits and ratios


def fits(rows: list[dict]) -> dict:
    """polyfit of peak_mb on n: ``ck`` linear (a + b·n), ``tk`` quadratic (a + b·n + c·n²); None with too few
    points.

    Coefficients are listed lowest order first ([a, b] or [a, b, c]), with the fit's R².
    """
    import numpy as np

    out = {}
    for impl, degree in (("ck", 1), ("tk", 2)):
        points = sorted((r["n"], r["peak_mb"]) for r in rows if r["impl"] == impl and r["peak_mb"] is not None)
        if len(points) <= degree:
            out[impl] = None
            continue
        n, mb = (np.array(v, dtype=float) for v in zip(*points))
        coefficients = np.polyfit(n, mb, degree)
        predicted = np.polyval(coefficients, n)
        total = float(((mb - mb.mean()) ** 2).sum())
        r2 = 1.0 - float(((mb - predicted) ** 2).sum()) / total if total > 0 else 1.0
        out[impl] = {"degree": degree, "coefficients": [float(c) for c in coefficients[::-1]], "r2": r2,
                     "lengths": [int(x) for x in n]}
    return out


def fit_value(fit: dict | None, n: float) -> float | None:
    if fit is None:
        return None
    return sum(c * n**i for i, c in enumerate(fit["coefficients"]))


def ratios(rows: list[dict], fitted: dict) -> list[dict]:
    """TK/CK peak-memory ratio at every n with a CK measurement: measured where TK was measured too, else the
    TK quadratic fit over the measured CK (``extrapolated``)."""
    peaks = {(r["impl"], r["n"]): r["peak_mb"] for r in rows if r["peak_mb"] is not None}
    out = []
    for n in sorted({r["n"] for r in rows}):
        ck = peaks.get(("ck", n))
        if not ck:
            continue
        tk = peaks.get(("tk", n))
        if tk is not None:
            out.append({"n": n, "tk_mb": tk, "ck_mb": ck, "ratio": tk / ck, "extrapolated": False})
        elif fitted.get("tk") is not None:
            tk = fit_value(fitted["tk"], n)
            out.append({"n": n, "tk_mb": tk, "ck_mb": ck, "ratio": tk / ck, "extrapolated": True})
    return out


def fit_text(fitted: dict) -> list[str]:
    lines = []
    for impl in IMPLS:
        fit = fitted.get(impl)
        if fit is None:
            lines.append(f"{impl}: too few measurements to fit")
            continue
        c = fit["coefficients"]
        terms = f"{c[0]:.1f} + {c[1]:.4g}·n" + (f" + {c[2]:.4g}·n²" if len(c) > 2 else "")
        span = f"n = {min(fit['lengths'])}..{max(fit['lengths'])}"
        lines.append(f"{impl}: peak_mb = {terms}  (R² {fit['r2']:.4f}, {span})")
    return lines


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


# --------------------------------------------------------------------------- outputs


def output_paths(out_dir: Path, device: str) -> dict[str, Path]:
    stem = "memory" if device == "cpu" else f"memory_{device}"
    paths = {ext: out_dir / f"{stem}.{ext}" for ext in ("csv", "jsonl", "png")}
    paths["fits"] = out_dir / f"{stem}_fits.json"
    return paths


def write_outputs(rows: list[dict], fitted: dict, paths: dict[str, Path], overwrite: bool) -> None:
    from common.io import atomic_write

    write_rows(rows, FIELDS, paths["csv"], paths["jsonl"], overwrite)
    with atomic_write(paths["fits"], overwrite=overwrite) as f:
        json.dump({"fits": fitted, "ratios": ratios(rows, fitted), "note": closing_note(rows, fitted)}, f, indent=1)
        f.write("\n")
    plot(rows, fitted, paths["png"], overwrite)


def plot(rows: list[dict], fitted: dict, path: Path, overwrite: bool) -> None:
    """Peak MB vs n for both encoders with their fits: left, linear axes up to n = 4000 (the paper's range,
    where there are lengths beyond it), the TK/CK ratio at 4000 annotated; right, log-log over every length."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from common.io import atomic_write

    figure, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    lengths = sorted({r["n"] for r in rows})
    paper_range = [n for n in lengths if n <= REPORT_N]
    ranges = [paper_range if len(paper_range) > 1 else lengths, lengths]
    style = {"tk": ("C3", "Transformer (TK)", "quadratic fit"), "ck": ("C0", "Conformer (CK)", "linear fit")}
    for axis, shown in zip(axes, ranges):
        grid = np.linspace(min(shown), max(shown), 200)
        for impl in IMPLS:
            color, label, fit_label = style[impl]
            points = sorted((r["n"], r["peak_mb"]) for r in rows
                            if r["impl"] == impl and r["peak_mb"] is not None and r["n"] in shown)
            if points:
                axis.plot(*zip(*points), "o", color=color, label=label)
            fit = fitted.get(impl)
            if fit is not None:
                top = max(fit["lengths"])
                inside, beyond = grid[grid <= top], grid[grid >= top]
                axis.plot(inside, fit_value(fit, inside), "-", color=color, alpha=0.6, label=f"{impl} {fit_label}")
                if len(beyond) > 1:
                    axis.plot(beyond, fit_value(fit, beyond), "--", color=color, alpha=0.6,
                              label=f"{impl} fit, extrapolated")
            skipped = [r["n"] for r in rows if r["impl"] == impl and r["peak_mb"] is None and r["n"] in shown]
            if skipped and fit is not None:
                axis.plot(skipped, [fit_value(fit, n) for n in skipped], "x", color=color,
                          label=f"{impl} skipped (fit value)")
        axis.set_xlabel("document length n (terms)")
        axis.set_ylabel("peak memory of a training step (MB)")
        axis.grid(True, which="both", alpha=0.3)
    axes[1].set_xscale("log")
    axes[1].set_yscale("log")
    entry = next((r for r in ratios(rows, fitted) if r["n"] == REPORT_N), None)
    if entry is not None:
        text = (f"TK/CK at n = {REPORT_N}: {entry['ratio']:.1f}x\n({entry['tk_mb']:.0f} vs {entry['ck_mb']:.0f} MB"
                + (", TK from its fit)" if entry["extrapolated"] else ")"))
        axes[0].annotate(text, (REPORT_N, entry["tk_mb"]), xytext=(0.35, 0.45), textcoords="axes fraction",
                         fontsize=9, arrowprops={"arrowstyle": "->", "alpha": 0.6})
    axes[0].legend(fontsize=8, loc="upper left")
    axes[0].set_title(f"n <= {max(ranges[0])}, linear axes", fontsize=9)
    axes[1].set_title("every length, log-log", fontsize=9)
    first = rows[0]
    figure.suptitle(f"NDRM1 training step (fwd + RankNet + bwd + Adam), {first['layers']} layers, hidden "
                    f"{first['hidden']}, {first['heads']} heads, {first['queries']} query x {first['docs']} docs, "
                    f"{first['device']}: peak memory above the step's start", fontsize=10)
    figure.tight_layout()
    with atomic_write(path, "wb", overwrite=overwrite) as f:
        figure.savefig(f, format="png", dpi=110)
    plt.close(figure)


def table(rows: list[dict], fitted: dict) -> str:
    """Measurements per n side by side, with the TK/CK ratio."""
    index = {(r["impl"], r["n"]): r for r in rows}
    ratio_at = {r["n"]: r for r in ratios(rows, fitted)}
    lines = [f"{'n':>6} {'tk MB':>10} {'tk ms':>10} {'ck MB':>10} {'ck ms':>10} {'tk/ck':>9}"]
    for n in sorted({r["n"] for r in rows}):
        cells = []
        for impl in IMPLS:
            r = index.get((impl, n))
            if r is None or r["peak_mb"] is None:
                cells += [f"{'skipped' if r else '-':>10}", f"{'':>10}"]
            else:
                cells += [f"{r['peak_mb']:>10.1f}", f"{r['ms']:>10.0f}"]
        entry = ratio_at.get(n)
        ratio = "" if entry is None else f"{entry['ratio']:.2f}" + ("*" if entry["extrapolated"] else "")
        lines.append(f"{n:>6} " + " ".join(cells) + f" {ratio:>9}")
    lines.append("(* from TK's quadratic fit: TK skipped at that n)")
    for r in rows:
        if r.get("skipped"):
            lines.append(f"skipped {r['impl']} n={r['n']}: {r['skipped']}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- command line


EPILOG = """\
what is measured:
  one training step of NDRM1 (forward, RankNet loss, backward, Adam step), the part of NDRM1/2/3
  whose memory depends on the encoder, with the paper's sizes by default. tk: Transformer layers
  (dot-product attention, O(n^2) memory); ck: Conformer layers (grouped convolution + separable
  attention, O(n)). Same random batch for both: --queries x --docs documents of exactly n terms.

memory (peak_mb):
  CPU: in a fresh subprocess per (impl, n), after one untimed full-size warm-up step (Adam's state
  and allocator caches then exist), the rise of the peak resident set during the timed step(s)
  above the resident set just before them, with glibc's mmap threshold fixed (--mmap_threshold) so
  that the resident set follows the live tensors. CUDA: torch's allocator peak above what was
  allocated before (common.benchmarking.cuda_peak_mb). ms: median of --repeats steps.

skips:
  CPU: tk needs about B*heads*n^2*4 bytes*(3*layers + 1) (B = queries*docs: three saved n x n
  tensors per layer plus the masked scores); a measurement whose estimate_mb exceeds
  --memory_fraction of MemAvailable is not run and becomes a row with "skipped": reason. Each child
  also limits its data segment (RLIMIT_DATA) to that budget; a child that fails or times out is a
  skipped row too.

outputs (--output_dir; memory_cuda.* on CUDA; refused if present unless --overwrite):
  memory.csv, memory.jsonl (one row per measurement), memory_fits.json (peak_mb = a + b*n for ck,
  a + b*n + c*n^2 for tk by numpy.polyfit; TK/CK ratio per n, from the tk fit where tk was skipped),
  memory.png (peak MB vs n with the fits, TK/CK ratio at n = 4000 annotated).
  --json: one JSON object per measurement per line on stdout, keys bench ("conformer_kernel_memory"),
  impl, n, pass ("train"), ms, peak_mb, device, queries, docs, estimate_mb, state_mb (weights + Adam
  moments, outside peak_mb), the sizes, and skipped (only when skipped).

example:
  python -m conformer_kernel.benchmark --json --lengths 500 1000 1500 2000 2500 3000 3500 4000 6000 8000
"""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The options, checked (a bad one ends the command in one line, `common.refusals`), with the device and
    ``--repeats`` resolved."""
    parser = ArgumentParser(
        prog="python -m conformer_kernel.benchmark",
        description="Conformer-Kernel Figure 2 (RQ2): peak memory of one NDRM1 training step with Transformer\n"
        "layers (tk) vs Conformer layers (ck) as the document length n grows, with linear (ck) and\n"
        "quadratic (tk) fits and the TK/CK ratio at each n and at n = 4000.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--lengths", type=positive_int, nargs="+", default=DEFAULT_LENGTHS, metavar="N",
                        help="document lengths in terms, every document exactly n terms, no padding (default: "
                        "500 1000 ... 4000)")
    parser.add_argument("--impls", nargs="+", default=list(IMPLS), choices=IMPLS,
                        help="tk: NDRM1 with Transformer layers; ck: with Conformer layers (default: both)")
    parser.add_argument("--queries", type=positive_int, default=1,
                        help="queries per batch (default: %(default)s; paper: 32)")
    parser.add_argument("--docs", type=positive_int, default=2,
                        help="documents per query, the first one relevant (default: %(default)s; paper: 4, but "
                        "32 x 4 does not fit a 24 GiB CPU machine for tk)")
    parser.add_argument("--query_terms", type=positive_int, default=20, help="terms per query (default: %(default)s)")
    parser.add_argument("--vocab_size", type=positive_int, default=10_000,
                        help="vocabulary size of the random token ids, at least 2: id 0 is padding (default: "
                        "%(default)s)")
    parser.add_argument("--hidden", type=positive_int, default=256, help="hidden size (default: %(default)s)")
    parser.add_argument("--heads", type=positive_int, default=32,
                        help="attention heads = convolution groups, dividing --hidden (default: %(default)s)")
    parser.add_argument("--layers", type=positive_int, default=2, help="encoder layers (default: %(default)s)")
    parser.add_argument("--conv_window", type=positive_int, default=31,
                        help="grouped-convolution window, odd, ck only (default: %(default)s)")
    parser.add_argument("--kernels", type=positive_int, default=10, help="RBF kernels (default: %(default)s)")
    parser.add_argument("--pool_window", type=positive_int, default=300,
                        help="kernel-pooling window (default: %(default)s)")
    parser.add_argument("--pool_stride", type=positive_int, default=100,
                        help="kernel-pooling stride (default: %(default)s)")
    parser.add_argument("--dropout", type=probability, default=0.2,
                        help="dropout, training mode (default: %(default)s)")
    parser.add_argument("--device", choices=DEVICES, help="device (default: cuda when available)")
    parser.add_argument("--repeats", type=positive_int,
                        help="timed steps, the median is reported (default: 1 on CPU, 5 on CUDA)")
    parser.add_argument("--threads", type=positive_int, default=os.cpu_count(),
                        help="torch.set_num_threads in each child (default: the core count, %(default)s)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seeds the weights and the token ids (default: %(default)s)")
    parser.add_argument("--memory_fraction", type=fraction, default=0.85,
                        help="CPU: skip a measurement whose estimate exceeds this fraction of MemAvailable, and "
                        "limit each child's data segment to it (default: %(default)s)")
    parser.add_argument("--mmap_threshold", type=nonnegative_int, default=128 * 1024,
                        help="bytes: each child runs with glibc's MALLOC_MMAP_THRESHOLD_ fixed at this, so that every "
                        "larger block is its own mapping, returned when freed, and the resident set follows the live "
                        "tensors (0: glibc's dynamic threshold, which keeps freed blocks of up to 32 MB in the heap "
                        f"and made ck's peak 40-90%% higher and noisy from run to run; at most {MAX_MMAP_THRESHOLD}) "
                        "(default: %(default)s)")
    parser.add_argument("--timeout", type=positive_float, default=1800,
                        help="seconds per measurement; a child past it is a skipped row (default: %(default)s)")
    parser.add_argument("--output_dir", type=output_folder, default=RESULTS,
                        help="where memory.csv/.jsonl/.png and memory_fits.json go (default: results/conformer_kernel)")
    parser.add_argument("--overwrite", action="store_true", help="replace existing result files")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object per measurement per line on stdout (everything else on stderr)")
    parser.add_argument("--_one", help=argparse.SUPPRESS)  # internal: one isolated measurement
    args = parser.parse_args(argv)
    refuse_repeats("--lengths", args.lengths)
    refuse_repeats("--impls", args.impls)
    if args.vocab_size < 2:
        parser.error(f"argument --vocab_size: must be at least 2 (id 0 is padding), got {args.vocab_size}")
    if args.hidden % args.heads:
        parser.error(f"argument --heads: must divide --hidden ({args.hidden}), got {args.heads}")
    if "ck" in args.impls and args.conv_window % 2 == 0:
        parser.error(f"argument --conv_window: must be odd (the convolution keeps the document's length), "
                     f"got {args.conv_window}")
    if args.mmap_threshold > MAX_MMAP_THRESHOLD:
        parser.error(f"argument --mmap_threshold: must be at most {MAX_MMAP_THRESHOLD} (glibc ignores a larger "
                     f"one), got {args.mmap_threshold}")
    args.device = resolve_device(args.device)
    if args.repeats is None:
        args.repeats = 1 if args.device == "cpu" else 5
    return args


SETTINGS = ("queries", "docs", "query_terms", "vocab_size", "hidden", "heads", "layers", "conv_window", "kernels",
            "pool_window", "pool_stride", "dropout", "repeats", "threads", "seed", "memory_fraction", "timeout",
            "mmap_threshold")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args._one:
        spec = json.loads(args._one)
        if spec["device"] == "cpu":
            limit_data_segment(spec["settings"]["memory_fraction"])
        print(json.dumps(measure_guarded(spec["impl"], spec["n"], spec["settings"], spec["device"])))
        return 0
    paths = output_paths(args.output_dir, args.device)
    refuse_existing(paths.values(), args.overwrite)
    settings = {k: getattr(args, k) for k in SETTINGS}
    report = sys.stderr if args.json else sys.stdout
    print(f"NDRM1 training step on {args.device}: {args.layers} layers, hidden {args.hidden}, {args.heads} heads, "
          f"conv window {args.conv_window}, {args.queries} query x {args.docs} docs of n terms, query "
          f"{args.query_terms} terms, {args.threads} threads, {args.repeats} timed step(s); MemAvailable "
          f"{available_mb() / 1024:.1f} GiB", file=report, flush=True)
    impls = [i for i in IMPLS if i in args.impls]
    rows = []
    for n in args.lengths:
        for impl in impls:
            reason = skip_reason(impl, n, settings, args.device)
            result = {"skipped": reason} if reason else measure_isolated(impl, n, settings, args.device)
            measured = "skipped" not in result
            row = {"bench": BENCH, "impl": impl, "n": n, "pass": PASS,
                   "ms": round(result["ms"], 1) if measured else None,
                   "peak_mb": round(result["peak_mb"], 1) if measured else None,
                   "device": args.device, "queries": args.queries, "docs": args.docs,
                   "estimate_mb": round(estimate_mb(impl, n, settings), 1),
                   "state_mb": round(result["state_mb"], 1) if measured else None,
                   "hidden": args.hidden, "heads": args.heads, "layers": args.layers, "conv_window": args.conv_window,
                   "query_terms": args.query_terms, "vocab_size": args.vocab_size, "threads": args.threads,
                   "mmap_threshold": args.mmap_threshold}
            if not measured:
                row["skipped"] = result["skipped"]
            rows.append(row)
            if args.json:
                print(json.dumps(row), flush=True)
            status = f"skipped: {row['skipped']}" if not measured else f"{row['peak_mb']:.1f} MB, {row['ms']:.0f} ms"
            print(f"{impl} n={n}: {status}", file=sys.stderr, flush=True)
    if all(r["peak_mb"] is None for r in rows):
        print("no measurement succeeded", file=sys.stderr)
        return 1
    fitted = fits(rows)
    write_outputs(rows, fitted, paths, args.overwrite)
    print(table(rows, fitted), file=report)
    print("fits:\n  " + "\n  ".join(fit_text(fitted)), file=report)
    print(closing_note(rows, fitted), file=report)
    print(f"wrote {', '.join(str(p) for p in paths.values())}", file=report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
