"""The generated tables of ``results/kernels/README.md``: the attention kernels' benchmark (``bench_cpu.csv``)."""

from __future__ import annotations

from common.report_tables.cells import Files, Table, TableError, bold, markdown, number

#: The lengths the README shows (the file also has 512 and 1,024).
LENGTHS = (2048, 4096, 8192)


def _rows(files: Files) -> dict:
    return {(r["impl"], int(r["n"]), r["pass"]): r for r in files.csv("bench_cpu.csv")}


def _timing(r: dict) -> str:
    """Median ms (min-max), useful GFLOP/s and, beside dense SDPA's, the fraction of its rate."""
    text = f"{number(r['ms']):.1f} ({number(r['ms_min']):.1f}-{number(r['ms_max']):.1f}), {number(r['gflops']):.0f}"
    rate = number(r["rate_vs_sdpa_dense"])
    return text if rate is None else f"{text}, {rate * 100:.0f}%"


def _speedup(rows: dict, n: int, phase: str, against: str) -> float:
    try:
        return number(rows[against, n, phase]["ms"]) / number(rows["tvm", n, phase]["ms"])
    except KeyError as missing:
        raise TableError(f"bench_cpu.csv has no row {missing}") from None


def _forward(files: Files) -> str:
    rows = _rows(files)
    impls = ["sdpa_dense", "tvm", "portable", "hf_longformer"]
    cells = [[str(n), *(_timing(rows[i, n, "fwd"]) for i in impls), f"{_speedup(rows, n, 'fwd', 'sdpa_dense'):.2f}x",
              f"{_speedup(rows, n, 'fwd', 'hf_longformer'):.2f}x"] for n in LENGTHS]
    return markdown(["n", *impls, "tvm vs sdpa_dense", "tvm vs hf_longformer"], "lllllrr", cells)


def _forward_backward(files: Files) -> str:
    rows = _rows(files)
    cells = [[str(n), _timing(rows["sdpa_dense", n, "fwdbwd"]), _timing(rows["tvm", n, "fwdbwd"]),
              f"{_speedup(rows, n, 'fwdbwd', 'sdpa_dense'):.2f}x"] for n in LENGTHS]
    return markdown(["n", "sdpa_dense", "tvm", "tvm vs sdpa_dense"], "lllr", cells)


#: The tvm kernel's speed targets: text, n, pass, against, the speed-up asked for.
TARGETS = [("forward ≥ 3x dense SDPA at 2048", 2048, "fwd", "sdpa_dense", 3),
           ("forward ≥ 6x dense SDPA at 4096", 4096, "fwd", "sdpa_dense", 6),
           ("forward ≥ 2x HF Longformer at 2048", 2048, "fwd", "hf_longformer", 2),
           ("forward + backward ≥ 2x dense SDPA at 2048", 2048, "fwdbwd", "sdpa_dense", 2)]


def _targets(files: Files) -> str:
    """Each target, the fraction of dense SDPA's rate it needs (the pattern's density times the speed-up; none
    against HF Longformer), and what the files give, in bold where met."""
    rows = _rows(files)
    cells = []
    for text, n, phase, against, asked in TARGETS:
        tvm = rows["tvm", n, phase]
        speedup = _speedup(rows, n, phase, against)
        shown = bold(f"{speedup:.2f}x") if speedup >= asked else f"{speedup:.2f}x"
        if against != "sdpa_dense":
            cells.append([text, "", shown])
            continue
        cells.append([text, f"{number(tvm['density']) * asked * 100:.0f}%",
                      f"{shown}, {number(tvm['rate_vs_sdpa_dense']) * 100:.0f}%"])
    return markdown(["target", "needs", "measured (the files)"], "lrl", cells)


TABLES = [
    Table("kernels/forward", _forward),
    Table("kernels/forward-backward", _forward_backward),
    Table("kernels/targets", _targets),
]
