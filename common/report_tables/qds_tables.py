"""The generated tables of ``results/qds/README.md``: the runs of ``runs/``, the efficiency benchmark
(``efficiency_cpu.csv``; without dropout, ``runs/efficiency-dropout0/efficiency_cpu.csv``) and the input statistics
(``input_statistics.json``, ``python -m qds.input_statistics``)."""

from __future__ import annotations

from pathlib import Path

from common.report_tables.cells import (MAP, MRR10, NDCG, Files, Table, bold, markdown, metric, metrics_table, number,
                                        value)

MEASURES = [NDCG, MAP, MRR10]


_default = metrics_table("run", MEASURES, [("QDS-Transformer (small, from scratch)", "default", "qds"),
                                           ("BM25 (the candidates)", "default", "bm25")])
_depth_100 = metrics_table("setting", MEASURES, [
    ("the default's model (the checkpoint of the best dev step)", "depth100", "qds"),
    ("`--model.num_heads 4` (4 heads of 16)", "depth100-heads4", "qds"), ("BM25", "depth100", "bm25")])
_trec_dl = metrics_table("run", MEASURES, [
    ("QDS, from scratch (2 layers, hidden 64), BPE learnt on the DL 2020 passages, BM25 top 20", "trec-dl-passages",
     "qds"),
    ("QDS, all-MiniLM-L6-v2 converted to a Longformer (`qds.pretrained`), BM25 top 20", "trec-dl-passages-minilm",
     "qds"),
    ("BM25 (Pyserini k1 0.9, b 0.4)", "trec-dl-passages", "bm25")])


def _layouts(files: Files) -> str:
    rows = [("`official`, `candidates` (the default)", "default", "qds", "`python -m qds.train`"),
            ("`sos`, `candidates`", "layout-sos", "qds", "`python -m qds.train --data.layout sos`"),
            ("`sos`, `qrels` (the TREC DL passage configs' setting)", "layout-sos-qrels", "qds",
             "`python -m qds.train --data.layout sos --data.positives qrels`"),
            ("BM25", "default", "bm25", "")]
    cells = [[label, *(metric(value(files.measures(run, key), m)) for _, m in MEASURES), command]
             for label, run, key, command in rows]
    return markdown(["layout, positives", *(h for h, _ in MEASURES), "command"], "lrrrl", cells)


SYSTEMS = {"dense": "RoBERTa (dense)", "sparse": "Sparse-Transformer (`sparse`)",
           "longformer_qa": "Longformer-QA (`longformer_qa`)", "qds_s": "QDS (S) (`qds_s`)",
           "qds_q": "QDS (Q) (`qds_q`)", "qds": "**QDS** (`qds`)"}


def efficiency_table(rows: list[dict]) -> str:
    """One row per (system, implementation): density, train and infer ms a pair with the ratio to dense RoBERTa
    (speed-up in brackets) and the peak MB of each pass; the QDS `tvm` row's times in bold (the paper's setting)."""
    by = {(r["system"], r["impl"], r["pass"]): r for r in rows}
    cells, named = [], set()
    for system, impl in dict.fromkeys((r["system"], r["impl"]) for r in rows):
        key = system == "qds" and impl == "tvm"
        line = ["" if system in named else SYSTEMS.get(system, system), bold(impl) if key else impl,
                f"{number(by[system, impl, 'infer']['density']) * 100:.2f}%"]
        named.add(system)
        peaks = []
        for phase in ("train", "infer"):
            r = by.get((system, impl, phase))
            if r is None or number(r["ms"]) is None:
                line += ["n/a", "n/a"]
                peaks.append("n/a")
                continue
            ratio = number(r["ratio_to_dense"])
            times = [f"{number(r['ms']):.0f}", f"{ratio:.2f} ({1 / ratio:.2f}x)"]
            line += [bold(t) for t in times] if key else times
            peaks.append(f"{number(r['peak_mb']):.0f}")
        cells.append(line + [" / ".join(peaks)])
    header = ["system", "impl", "density", "train ms/pair", "train / dense", "infer ms/pair", "infer / dense",
              "peak MB train / infer"]
    return markdown(header, "llllllll", cells)


def _efficiency_dropout0(files: Files) -> str:
    rows = files.run_file("efficiency-dropout0", "efficiency_cpu.csv")
    if rows is None:
        return markdown(["system", "impl", "train ms/pair", "train / dense"], "llrr", [])
    return efficiency_table(rows)


PATTERNS = {p: label.replace("**", "") for p, label in SYSTEMS.items() if p != "dense"}


def _density(files: Files) -> str:
    density = files.json("input_statistics.json")["density"]
    cells = [[PATTERNS[p], *(f"{density[layout][p] * 100:.2f}%" for layout in ("official", "sos"))] for p in PATTERNS]
    return markdown(["pattern", "`official` layout", "`sos` layout"], "lrr", cells)


def _input_lengths(files: Files) -> str:
    stats = files.json("input_statistics.json")
    rows = [(f"queries of `{Path(path).name}`", "words a query", s) for path, s in stats["queries"].items()]
    sentences = stats["sentences"]
    rows.append((f"sentences of the first {sentences['passages_per_query']} passages of each of the "
                 f"{sentences['queries']} queries of `{Path(sentences['candidates']).name}`", "words a sentence",
                 sentences))
    pairs = stats["builtin_pairs"]
    rows.append((f"the built-in test queries' top {pairs['depth']} candidates, QDS input (official layout, cut at "
                 f"{pairs['max_length']})", "tokens a pair", pairs))
    cells = [[what, unit, f"{s['count']:,}", f"{s['mean']:.1f}", f"{s['max']:,}"] for what, unit, s in rows]
    return markdown(["what", "length in", "count", "mean", "max"], "llrrr", cells)


TABLES = [
    Table("qds/default", _default),
    Table("qds/depth-100", _depth_100),
    Table("qds/trec-dl", _trec_dl),
    Table("qds/layouts", _layouts),
    Table("qds/density", _density),
    Table("qds/input-lengths", _input_lengths),
    Table("qds/efficiency", lambda files: efficiency_table(files.csv("efficiency_cpu.csv"))),
    Table("qds/efficiency-dropout0", _efficiency_dropout0),
]
