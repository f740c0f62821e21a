"""The generated tables of ``results/earl/README.md``: the runs of ``runs/``, ``relevance_level.csv``, Table 2's
TREC DL rows (``results/reported/earl.csv``) and the speed benchmark (``speed.csv``, ``threads2/speed.csv``)."""

from __future__ import annotations

from common.report import load_reported
from common.report_tables.cells import (MAP, MRR, MRR10, NDCG, Files, Table, TableError, bold, fixed, markdown,
                                        metric, metrics_table, number, rounded, selection_table,
                                        store_dtypes_table)

MEASURES = [NDCG, MAP, MRR, MRR10]


_default = metrics_table("run", MEASURES, [
    ("EARL ClsPool tied (small, from scratch)", "default", "earl_cls_tied"),
    ("BERT ranker (same size, same training)", "default", "bert_ranker"), ("BM25 (the candidates)", "default", "bm25")])
_depth_100 = metrics_table("setting (`python -m earl.train --data.depth 100 --compare_with '[]'` and)", [NDCG], [
    ("the default trained on the top 30, evaluated on the top 100 (`earl.evaluate --depth 100`)", "default-depth100",
     "earl_cls_tied"),
    ("trained on the top 100", "depth100", "earl_cls_tied"),
    ("`--model.pool mean`", "depth100-pool-mean", "earl_mean_tied"),
    ("`--model.lr 3e-3`", "depth100-lr3e-3", "earl_cls_tied"),
    ("`--trainer.max_steps 1500 --trainer.val_check_interval 500`", "depth100-1500-steps", "earl_cls_tied"),
    ("`--model.hidden_size 128 --model.num_heads 4 --model.intermediate_size 512`", "depth100-hidden128",
     "earl_cls_tied"),
    ("`--data.passage_length 512`", "depth100-passage512", "earl_cls_tied"),
    ("`--model.architecture bert_ranker` (the BERT ranker of the same size, trained on the top 100)",
     "depth100-bert-ranker", "bert_ranker"),
    ("BM25", "depth100", "bm25")])
_trec_dl = metrics_table("run", MEASURES, [
    ("EARL ClsPool", "trec-dl-cls", "earl_cls"), ("EARL AvePool", "trec-dl-mean", "earl_mean"),
    ("EARL ClsPool tied", "trec-dl-cls-tied", "earl_cls_tied"),
    ("EARL AvePool tied", "trec-dl-mean-tied", "earl_mean_tied"),
    ("BERT ranker (MiniLM cross-encoder), hinge loss", "trec-dl-bert-ranker", "bert_ranker"),
    ("BERT ranker, cross-entropy (the paper's loss, Sec. 4.2)", "trec-dl-bert-ranker-cross-entropy", "bert_ranker"),
    ("BERT-Siamese (MiniLM, mean pooling, dot product)", "trec-dl-bert-siamese", "bert_siamese"),
    ("BM25 (Pyserini k1 0.9, b 0.4)", "trec-dl-cls", "bm25")])
_trec_dl_tried = metrics_table("change from the config", MEASURES, [
    ("none (the table's row)", "trec-dl-mean", "earl_mean"),
    ("`--model.lr 3e-5` (the paper's)", "trec-dl-mean-lr3e-5", "earl_mean"),
    ("`--model.loss cross_entropy` (MORES's 2-class head)", "trec-dl-mean-cross-entropy", "earl_mean"),
    ("`--data.depth 20` (train and re-rank BM25's top 20 only)", "trec-dl-mean-depth20", "earl_mean")])


_selection = selection_table("earl_mean", [
    ("the config's: lr 1e-4, hinge loss, BM25's top 100", "mean"), ("`--model.lr 3e-5` (the paper's)", "mean-lr3e-5"),
    ("`--model.loss cross_entropy` (MORES's 2-class head)", "mean-cross-entropy"),
    ("`--data.depth 20` (trains on and re-ranks BM25's top 20, the held-out queries' too)", "mean-depth20")])


def _stores(files: Files) -> str:
    cells, end_to_end = [], []
    for label, run in (("S1 fp32 (D)", "store-s1-fp32"), ("S1 fp16", "store-s1-fp16"),
                       ("S2 fp32 (D', Eq. 25)", "store-s2-fp32"), ("S2 fp16", "store-s2-fp16")):
        report = files.run_file(run, "exactness.json")
        if report is None:
            cells.append([label, "", "", "", "", ""])
            continue
        end_to_end.append(report["end_to_end_seconds"])
        cells.append([label, fixed(0)(report["bytes_per_document"]), f"{report['store_seconds']:.2f} s",
                      f"{report['max_abs_score_difference']:.1e}", str(report["queries_reordered"]),
                      f"{report['ndcg_cut_10_change']:.4g}"])
    seconds = f"{min(end_to_end):.1f}-{max(end_to_end):.1f} s" if end_to_end else ""
    cells.append(["end to end (T_doc at query time)", "", seconds, "", "", ""])
    header = ["store", "bytes per document", "scoring 100 queries", "largest \\|score difference\\| to end to end",
              "queries reordered", "NDCG@10 change"]
    return markdown(header, "lrrrrr", cells)


_PUBLISHED = ("OPEN_AI_ADA2", "D_BERT_KD_TASB", "REP_LLAMA", "SPLADE_P_P_ENSEMBLE_DISTIL")  # re-ranked and as published
#: relevance_level.csv's rows the README shows, in its order: (run, ranking).
LEVEL_ROWS = [("BM25 top 1000 (Anserini)", "as published")] + [
    (f"{run} top 100", "reranking BM25 top 1000") for run in ("BM25_RM3", *_PUBLISHED)] + [
    (f"{run} top 100", "as published") for run in _PUBLISHED]
RANKINGS = {"as published": "as published", "reranking BM25 top 1000": "re-ordering BM25's top 1,000"}


def _relevance_level(files: Files) -> str:
    rows = {(r["run"], r["ranking"], r["level"]): r for r in files.csv("relevance_level.csv")}
    cells = []
    for run, ranking in LEVEL_ROWS:
        try:
            one, two = rows[run, ranking, "1"], rows[run, ranking, "2"]
        except KeyError:
            raise TableError(f"relevance_level.csv has no levels 1 and 2 of {run}, {ranking}") from None
        cells.append([run, RANKINGS[ranking], one["ndcg_cut_10"], one["map"], one["recip_rank"], two["map"],
                      two["recip_rank"]])
    header = ["run (DL 2019 passages)", "ranking", "NDCG@10", "MAP -l 1", "MRR -l 1", "MAP -l 2", "MRR -l 2"]
    return markdown(header, "llrrrrr", cells)


def _table_2(files: Files) -> str:
    """Table 2's TREC DL rows as printed (``results/reported/earl.csv``), the four EARL variants as a range."""
    reported = load_reported("earl", table=2, dataset="trec-dl-2019-passage")
    cell = {(m, k): v for m, k, v in zip(reported["method"], reported["metric"], reported["value"])}
    earl = ["EARL ClsPool", "EARL AvePool", "EARL ClsPool Tied", "EARL AvePool Tied"]
    measures = ["ndcg_cut_10", "map", "recip_rank"]
    cells = [["BERT ranker"] + [metric(cell["BERT ranker", m]) for m in measures],
             ["EARL ClsPool, AvePool, ClsPool Tied, AvePool Tied"]
             + [f"{metric(min(cell[e, m] for e in earl))}-{metric(max(cell[e, m] for e in earl))}" for m in measures],
             ["BERT-Siamese ranker"] + [metric(cell["BERT-Siamese ranker", m]) for m in measures]]
    return markdown(["Table 2 row", "NDCG@10", "MAP", "MRR"], "lrrr", cells)


def _times(x: float | None) -> str:
    """A ratio as the README writes it: one place and an x."""
    return "" if x is None else f"{rounded(x, 1)}x"


def _paper_speedups() -> dict[int, str]:
    """d -> "S1x / S2x", Table 3's CPU speed-ups."""
    reported = load_reported("earl", table=3, metric="speedup_x")
    reported = reported[reported["setting"].str.contains("device=cpu")]
    by = {(s.split("doc_len=")[1].split(";")[0], m): v
          for s, m, v in zip(reported["setting"], reported["method"], reported["value"])}
    return {int(d): f"{_times(by[d, 'EARL w/ S1'])} / {_times(by[d, 'EARL w/ S2'])}" for d, _ in by}


def _speed(folder: str, size: str, paper: bool):
    """Table 3's grid at `size` from ``<folder>speed.csv``: per d, the ranker's seconds, each store's seconds (its
    cold read + its compute), speed-ups (on the compute alone), the analytic and FLOP ratios, the documents each
    store held."""
    def render(files: Files) -> str:
        by = {(r["impl"], int(r["n"])): r for r in files.csv(f"{folder}speed.csv") if r["size"] == size}
        lengths = sorted({n for _, n in by})
        paper_speedups = _paper_speedups() if paper else {}
        cells = []
        for n in lengths:
            line = [str(n), f"{number(by['bert_ranker', n]['ms']) / 1000:.1f}"]
            for impl in ("earl_s1", "earl_s2"):
                r = by[impl, n]
                seconds = (f"{number(r['ms']) / 1000:.2f} ({number(r['read_ms']) / 1000:.2f} + "
                           f"{number(r['compute_ms']) / 1000:.2f})")
                speedup = (bold if size == "base" and n == lengths[-1] else str)(_times(number(r["speedup"])))
                speedup += f" ({_times(number(r['compute_speedup']))})"
                line += [seconds, speedup, _times(number(r["analytic_ratio"])), _times(number(r["flop_ratio"]))]
            line.append(" / ".join(fixed(0)(number(by[impl, n]["store_documents"])) for impl in ("earl_s1", "earl_s2")))
            if paper:
                line.append(paper_speedups[n])
            cells.append(line)
        header = ["d", "BERT ranker s"]
        for store in ("S1", "S2"):
            header += [f"{store} s (read + compute)", f"{store} speed-up (compute alone)", "analytic", "FLOPs"]
        header += ["S1 / S2 documents"] + (["paper S1 / S2 (CPU)"] if paper else [])
        return markdown(header, "r" * len(header), cells)
    return render


def _bar(files: Files) -> str:
    """The speed bar at d = 512 (S1 >= 30x, S2 >= 120x), one row a thread count and store: times per query
    (``bar/threads<t>/speed.csv``) and the speed-ups on the compute alone, held in memory and read from the disk."""
    cells = []
    for threads in (1, 2):
        rows = {r["impl"]: r for r in files.csv(f"bar/threads{threads}/speed.csv")}
        ranker = number(rows["bert_ranker"]["ms"])
        for impl, bar in (("earl_s1", 30), ("earl_s2", 120)):
            compute, warm, warm_read, cold = (number(rows[impl][key]) for key in ("compute_ms", "warm_ms",
                                                                                  "warm_read_ms", "ms"))
            cells.append([str(threads), impl[-2:].upper(), f"{ranker / 1000:.2f}", fixed(0)(warm),
                          fixed(0)(warm_read), fixed(0)(cold), _times(ranker / compute),
                          (bold if ranker / warm >= bar else str)(_times(ranker / warm)),
                          (bold if ranker / cold >= bar else str)(_times(ranker / cold)),
                          f"{bar}x"])
    header = ["threads", "store", "BERT ranker s", "EARL held in memory ms", "of which read", "EARL from the disk ms",
              "speed-up: compute", "held in memory", "from the disk", "bar"]
    return markdown(header, "rlrrrrrrrr", cells)


TABLES = [
    Table("earl/default", _default),
    Table("earl/depth-100", _depth_100),
    Table("earl/trec-dl", _trec_dl),
    Table("earl/trec-dl-tried", _trec_dl_tried),
    Table("earl/selection", _selection),
    Table("earl/store-dtypes", store_dtypes_table("earl_mean", [
        ("EARL AvePool", f"{strategy} {dtype}", f"trec-dl-store-{strategy.lower()}-{dtype}")
        for strategy in ("S1", "S2") for dtype in ("fp32", "int8")])),
    Table("earl/relevance-level", _relevance_level),
    Table("earl/table-2", _table_2),
    Table("earl/stores", _stores),
    Table("earl/bar", _bar),
    Table("earl/speed-base", _speed("", "base", paper=True)),
    Table("earl/speed-small", _speed("", "small", paper=False)),
    Table("earl/speed-threads2-base", _speed("threads2/", "base", paper=True)),
    Table("earl/speed-threads2-small", _speed("threads2/", "small", paper=False)),
]
