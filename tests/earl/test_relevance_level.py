"""The relevance level of EARL's Table 2 TREC DL 2019 MRR and MAP (results/earl/README.md): the evidence
(`earl.relevance_level`, results/earl/relevance_level.csv) checked against trec_eval 9.0.8's own outputs and the
paper's numbers (results/reported/earl.csv), and the level printed beside them by `earl.train.paper_tables`."""

import csv
from pathlib import Path
from types import SimpleNamespace

import pytest

from common.report import REPORTED_RELEVANCE_LEVELS, load_reported
from earl import relevance_level
from earl.train import paper_tables

REPO = Path(__file__).resolve().parents[2]
CSV = REPO / "results" / "earl" / "relevance_level.csv"


def committed_rows() -> list[dict]:
    with CSV.open(encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_the_committed_csv_is_what_the_command_writes(shared_data, tmp_path, capsys):
    output = tmp_path / "relevance_level.csv"
    assert relevance_level.main(["--data_dir", str(shared_data / "trec_dl"), "--output", str(output)]) == 0
    assert output.read_text(encoding="utf-8") == CSV.read_text(encoding="utf-8")
    assert "OPEN_AI_ADA2 top 100\treranking BM25 top 1000\t1\t0.4846\t0.9496\t0.6998" in capsys.readouterr().out


def test_the_published_runs_measure_as_trec_eval_printed_them(shared_data):
    """trec_eval 9.0.8's ``-m all_trec`` and ``-m all_trec -l 2`` outputs (../shared/data/KEY_METRICS.tsv)."""
    printed = {}
    with (shared_data / "KEY_METRICS.tsv").open(encoding="utf-8") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            if row["qrels"].endswith("qrels.dl19-passage.txt") and row["version"] == "9.0.8" \
                    and row["options"] in ("-m all_trec", "-m all_trec -l 2"):
                level = 2 if row["options"].endswith("-l 2") else 1
                printed[Path(row["run"]).name.split(".")[0], level, row["measure"]] = row["value"]
    rows = [row for row in committed_rows() if row["ranking"] == "as published"]
    assert len(rows) == 14  # BM25's top 1,000 and 6 top-100 runs, at levels 1 and 2
    for row in rows:
        name = "run" if row["run"].startswith("BM25 top 1000") else row["run"].removesuffix(" top 100")
        for measure in relevance_level.MEASURES:
            assert row[measure] == printed[name, int(row["level"]), measure], (row["run"], row["level"], measure)


def test_only_level_1_puts_the_papers_mrr_and_map_beside_its_ndcg():
    """Table 2's BERT ranker and EARL rows (NDCG@10 0.67-0.72) against the re-orderings of BM25's top 1,000 by runs
    of NDCG@10 0.70-0.74: every paper MRR (0.924-0.967) is above every such run's level-2 MRR (at most 0.911)
    and within 0.03 of the level-1 ones (0.950-0.988); the run nearest in NDCG@10 (0.6998 against the BERT
    ranker's 0.7032) has level-1 MAP and MRR nearest the BERT ranker's."""
    reported = load_reported("earl", table=2, dataset="trec-dl-2019-passage")
    paper = {m: dict(zip(rows["metric"], rows["value"])) for m, rows in reported.groupby("method")}
    interactive = {m: v for m, v in paper.items() if m != "BERT-Siamese ranker"}
    assert len(interactive) == 5 and all(0.67 < v["ndcg_cut_10"] < 0.72 for v in interactive.values())
    reranked = [{k: (v if k in ("run", "ranking") else float(v)) for k, v in row.items()} for row in committed_rows()
                if row["ranking"] == "reranking BM25 top 1000" and 0.69 < float(row["ndcg_cut_10"]) < 0.74]
    assert len(reranked) == 8  # TASB, ADA2, RepLLaMA and SPLADE, at both levels
    level2_mrr = [row["recip_rank"] for row in reranked if row["level"] == 2]
    level1_mrr = [row["recip_rank"] for row in reranked if row["level"] == 1]
    for values in interactive.values():
        assert values["recip_rank"] > max(level2_mrr)
        assert min(level1_mrr) - 0.03 < values["recip_rank"] < max(level1_mrr)
    nearest = {row["level"]: row for row in reranked if row["run"].startswith("OPEN_AI_ADA2")}
    bert = paper["BERT ranker"]
    for measure in ("map", "recip_rank"):
        assert abs(nearest[1][measure] - bert[measure]) < abs(nearest[2][measure] - bert[measure])
    assert abs(nearest[1]["map"] - bert["map"]) < 0.002  # 0.4846 against 0.4836
    assert REPORTED_RELEVANCE_LEVELS["earl", "trec-dl-2019-passage"] == 1


@pytest.mark.parametrize("level", [1, 2])
def test_train_prints_each_sides_level_beside_table_2(level):
    """A hand-made metrics file of the BERT ranker on TREC DL 2019, measured at `level` (the data module's)."""
    metrics = {"bert_ranker": {"ndcg_cut_10": 0.70, "map": 0.48, "recip_rank": 0.93, "mrr@10": 0.93},
               "bm25": {"ndcg_cut_10": 0.5058, "map": 0.3773, "recip_rank": 0.8245, "mrr@10": 0.8245}}
    text = paper_tables(metrics, "irds:msmarco-passage/trec-dl-2019/judged", "trec-dl-2019-passage",
                        SimpleNamespace(tasks=SimpleNamespace(relevance_level=level)))
    lines = text.splitlines()
    assert lines[0] == "Reproduced vs reported (trec-dl-2019-passage)"
    header = [cell.strip() for cell in lines[2].strip("|").split("|")]
    assert header == ["table", "method", "metric", "reported", "reproduced", "diff", "reported_level",
                      "reproduced_level"]
    cells = {c[2]: c[3:] for c in ([x.strip() for x in line.strip("|").split("|")] for line in lines[4:7])}
    assert cells == {"recip_rank": ["0.9349", "0.93", "-0.0049", "1", str(level)],
                     "ndcg_cut_10": ["0.7032", "0.7", "-0.0032", "graded", "graded"],
                     "map": ["0.4836", "0.48", "-0.0036", "1", str(level)]}
    if level == 1:
        assert len(lines) == 7  # no note: like with like
    else:
        assert lines[7] == "" and lines[8].startswith(
            "note: recip_rank, map on trec-dl-2019-passage reported at relevance level 1 (labels >= 1 relevant), "
            "reproduced at level 2: different measures")
