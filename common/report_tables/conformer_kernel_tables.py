"""The generated tables of ``results/conformer_kernel/README.md``: the runs of ``runs/`` and the memory benchmark
(``memory.csv`` and ``memory_fits.json``, ``docs1/`` the same for one document a query)."""

from __future__ import annotations

from common.report_tables.cells import NCG100, NDCG, Files, Table, TableError, bold, markdown, metrics_table, number

MEASURES = [NDCG, NCG100, ("AP", "map"), ("RR", "recip_rank")]


_trec_dl = metrics_table("run", MEASURES, [("NDRM3 rerank (BM25 top 20)", "trec-dl-passages", "ndrm3-rerank"),
                                           ("BM25 (Pyserini k1 0.9, b 0.4)", "trec-dl-passages", "bm25")])
_default = metrics_table("run", MEASURES, [("NDRM3 rerank (BM25 top 100)", "default", "ndrm3-rerank"),
                                           ("NDRM3 fullrank (impact index)", "default", "ndrm3-fullrank"),
                                           ("BM25", "default", "bm25")])


def _memory(folder: str, bold_at: int):
    """Peak MB of TK and CK at each n, and their ratio (TK from its quadratic fit where TK was skipped, the fit's
    value shown up to `bold_at`); the ratio at `bold_at` (the paper's 4,000 terms) in bold."""
    def render(files: Files) -> str:
        peaks = {(r["impl"], int(r["n"])): r for r in files.csv(f"{folder}memory.csv")}
        ratios = {r["n"]: r for r in files.json(f"{folder}memory_fits.json")["ratios"]}
        cells = []
        for n in sorted({n for _, n in peaks}):
            tk, ck, fit = peaks["tk", n], peaks["ck", n], ratios.get(n)
            if fit is None:
                raise TableError(f"{folder}memory_fits.json has no ratio at n = {n}")
            ratio = f"{fit['ratio']:.1f}" if fit["ratio"] < 100 else f"{fit['ratio']:.0f}"
            ratio = bold(ratio) if n == bold_at else ratio
            if number(tk["peak_mb"]) is None:
                shown = f"skipped (fit: {fit['tk_mb']:,.0f})" if n <= bold_at else "skipped"  # up to the paper's n
                ratio += " (TK from fit)"
            else:
                shown = f"{number(tk['peak_mb']):.1f}"
                ratio += " (measured)" if n == bold_at else ""
            cells.append([str(n), shown, f"{number(ck['peak_mb']):.1f}", ratio])
        return markdown(["n", "TK peak MB", "CK peak MB", "TK / CK"], "rrrr", cells)
    return render


TABLES = [
    Table("conformer_kernel/trec-dl", _trec_dl),
    Table("conformer_kernel/default", _default),
    Table("conformer_kernel/memory", _memory("", 4000)),
    Table("conformer_kernel/memory-docs1", _memory("docs1/", 4000)),
]
