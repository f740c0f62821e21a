"""The generated tables of ``results/scale/README.md``: ``scale.csv`` and ``extrapolation.json``."""

from __future__ import annotations

from common.report_tables.cells import Files, Table, fixed, markdown, number, rounded

MIB = 2**20


def _training(files: Files) -> str:
    cells = []
    for r in (r for r in files.csv("scale.csv") if r["part"] == "training"):
        dicts = number(r["dicts_private_mb"])
        cells.append([fixed(0)(number(r["candidates"])), f"{number(r['build_s']):.1f}",
                      f"{number(r['bytes_per_candidate']):.2f}", fixed(0)(number(r["peak_mb"])),
                      f"{number(r['private_mb']):.1f}", "not measured" if dicts is None else fixed(0)(dicts)])
    header = ["candidates", "build (s)", "bytes / candidate on disk", "builder's peak (MiB)",
              "private MiB / process: table", "dicts"]
    return markdown(header, "rrrrrr", cells)


def _small(x: float) -> str:
    """Private MiB: two places below 1 MiB (0.24), else one (0.0, 2.0)."""
    return f"{x:.2f}" if 0 < x < 1 else f"{x:.1f}"


def _stores(files: Files) -> str:
    cells = []
    for r in (r for r in files.csv("scale.csv") if r["part"] == "store"):
        cells.append([fixed(0)(number(r["documents"])), f"{number(r['build_s']):.2f}",
                      f"{number(r['bytes']) / MIB:.1f}", f"{number(r['open_s']) * 1000:.1f}",
                      _small(number(r["private_mb"])), f"{number(r['scattered_ms']):.2f}",
                      f"{number(r['contiguous_ms']):.2f}", f"{number(r['scatter_ratio']):.2f}",
                      f"{number(r['scattered_cold_ms']):.1f}", f"{number(r['contiguous_cold_ms']):.1f}",
                      f"{number(r['lru64_ms']):.1f}"])
    header = ["documents", "build (s)", "MiB", "open (ms)", "private after open (MiB)", "scattered warm (ms)",
              "contiguous warm (ms)", "ratio", "scattered from the disk (ms)", "contiguous from the disk (ms)",
              "64 maps (ms)"]
    return markdown(header, "r" * len(header), cells)


STORES = {"earl_s1": "EARL S1 (768 columns)", "earl_s2": "EARL S2 (K = 2: 3,072 columns)",
          "mva1": "MVA¹ (70 timesteps of 2·128)", "mva2": "MVA² (8 timesteps)", "de": "DE (one 768 vector)"}


def _paper_widths(files: Files) -> str:
    def size(b: float) -> str:
        return f"{rounded(b / 1e12, 2)} TB" if b >= 1e12 else f"{rounded(b / 1e9, 0)} GB"

    def ms(x: float) -> str:
        return f"{x:.1f}" if x < 10 else f"{x:.0f}"

    def fits(s: dict) -> str:
        return "yes" if s["fits_1tb_page_cache"] else "no"

    stores = files.json("extrapolation.json")["stores_at_paper_widths"]
    cells = [[STORES.get(k, k), size(s["bytes"]), size(s["float16"]["bytes"]), size(s["int8"]["bytes"]), fits(s),
              fits(s["int8"]), ms(s["read_ms_per_query_warm"]), ms(s["read_ms_per_query_cold"])]
             for k, s in stores.items()]
    header = ["store", "fp32", "fp16", "int8", "fp32 fits a 1 TB node's page cache", "int8 fits it",
              "read a query, fp32, warm (ms)", "read a query, fp32, from the disk (ms)"]
    return markdown(header, "lrrrllrr", cells)


TABLES = [
    Table("scale/training", _training),
    Table("scale/stores", _stores),
    Table("scale/paper-widths", _paper_widths),
]
