"""``python -m earl.relevance_level [--data_dir DIR] [--output FILE.csv]``: the evidence for the relevance level of
EARL's Table 2 TREC DL 2019 MRR and MAP (results/earl/README.md, "Relevance level of Table 2's TREC DL numbers").

Each published DL 2019 run of ``DIR/runs`` is measured at levels 1 and 2, as published and as a re-ordering of BM25's
top 1,000 (what the paper's rankers produce); the rows are written to ``FILE.csv`` and printed.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from common.data.formats import Qrels, Run, read_qrels, read_run
from common.io import atomic_write
from common.metrics import evaluate_run
from common.metrics.ordering import ranked
from common.refusals import ArgumentParser

#: The measures of Table 2's TREC DL columns, as `common.evaluate` names them.
MEASURES = ("map", "recip_rank", "ndcg_cut_10")
#: The relevance levels compared: trec_eval's default and TREC DL's official one for passages.
LEVELS = (1, 2)
#: BM25's top 1,000 (Anserini, default k1 0.9, b 0.4), the candidates the paper re-ranks, under ``DIR/runs``.
BM25_RUN = "run.msmarco-v1-passage.bm25-default.dl19.txt"
#: The folder of the published top-100 runs under ``DIR/runs`` (their DL 2019 files: ``*dl19*``).
TOP100_FOLDER = "rank_llm_data_top100"
QRELS = "qrels/qrels.dl19-passage.txt"
COLUMNS = ("run", "ranking", "level", *MEASURES)


def reranked_bm25(run: Run, bm25: Run) -> Run:
    """BM25's top 1,000 of each query re-ordered by `run`: its passages first, in its order, then BM25's order."""
    out: Run = {}
    for qid, candidates in bm25.items():
        first = [doc for doc, _ in ranked(run.get(qid, {})) if doc in candidates]
        chosen = set(first)
        order = first + [doc for doc, _ in ranked(candidates) if doc not in chosen]
        out[qid] = {doc: float(len(order) - rank) for rank, doc in enumerate(order)}
    return out


def evidence(data_dir: str | Path) -> list[dict]:
    """Each run x ranking x level with its MAP, MRR and NDCG@10 (4 decimals, as trec_eval prints them)."""
    data_dir = Path(data_dir)
    qrels: Qrels = read_qrels(data_dir / QRELS)
    bm25 = read_run(data_dir / "runs" / BM25_RUN)
    runs = {"BM25 top 1000 (Anserini)": (bm25, False)}
    for path in sorted((data_dir / "runs" / TOP100_FOLDER).glob("*dl19*")):
        runs[path.name.split(".")[0] + " top 100"] = (read_run(path), True)
    rows = []
    for name, (run, rerank) in runs.items():
        rankings = [("as published", run)] + ([("reranking BM25 top 1000", reranked_bm25(run, bm25))] if rerank else [])
        for ranking, ordered in rankings:
            for level in LEVELS:
                values = evaluate_run(qrels, ordered, MEASURES, relevance_level=level)
                rows.append({"run": name, "ranking": ranking, "level": level,
                             **{m: f"{values[m]:.4f}" for m in MEASURES}})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m earl.relevance_level", description=__doc__.split("\n\n")[0],
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data_dir", default="../shared/data/trec_dl", type=Path,
                        help="the TREC DL data folder (qrels/, runs/; default: %(default)s)")
    parser.add_argument("--output", default="results/earl/relevance_level.csv", type=Path,
                        help="the CSV written (replaced; default: %(default)s)")
    args = parser.parse_args(argv)
    rows = evidence(args.data_dir)
    with atomic_write(args.output, overwrite=True) as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    writer = csv.DictWriter(sys.stdout, fieldnames=COLUMNS, delimiter="\t", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
