"""Per-query DataFrames and the paired t-test between runs."""

from __future__ import annotations

import pytest
from scipy import stats

from common.data.formats import read_qrels, read_run
from common.metrics import paired_ttest, per_query

# One relevant document "r" per query. Run a ranks it 1st, 1st, 2nd; run b 2nd, 2nd, 1st.
# RR: a = [1, 1, 1/2], b = [1/2, 1/2, 1]; differences d = [1/2, 1/2, -1/2]:
#   mean(d) = 1/6, sd(d) = 1/sqrt(3), t = (1/6) / (1/sqrt(3) / sqrt(3)) = 1/2, df = 2.
#   For df = 2 the t CDF is 1/2 + t / (2 sqrt(2 + t^2)), so p = 1 - t / sqrt(2 + t^2) = 1 - 0.5/1.5 = 2/3.
QRELS = {q: {"r": 1, "n": 0} for q in ("1", "2", "3")}
RUN_A = {"1": {"r": 2.0, "n": 1.0}, "2": {"r": 2.0, "n": 1.0}, "3": {"r": 1.0, "n": 2.0}}
RUN_B = {"1": {"r": 1.0, "n": 2.0}, "2": {"r": 1.0, "n": 2.0}, "3": {"r": 2.0, "n": 1.0}}


def test_paired_ttest_by_hand():
    result = paired_ttest(per_query(QRELS, RUN_A), per_query(QRELS, RUN_B), "recip_rank")
    assert (result.measure, result.queries) == ("recip_rank", 3)
    assert (result.mean_a, result.mean_b) == pytest.approx((5 / 6, 2 / 3))
    assert (result.statistic, result.pvalue) == pytest.approx((0.5, 2 / 3))


def test_queries_are_paired_by_id_not_by_row_order():
    a, b = per_query(QRELS, RUN_A), per_query(QRELS, RUN_B).iloc[::-1]
    assert paired_ttest(a, b, "recip_rank").statistic == pytest.approx(0.5)


def test_different_query_sets_are_refused_unless_complete():
    partial_b = {q: docs for q, docs in RUN_B.items() if q != "1"}
    with pytest.raises(ValueError, match=r"different queries.*complete=True"):
        paired_ttest(per_query(QRELS, RUN_A), per_query(QRELS, partial_b), "recip_rank")
    result = paired_ttest(
        per_query(QRELS, RUN_A, complete=True), per_query(QRELS, partial_b, complete=True), "recip_rank"
    )
    assert result.queries == 3 and result.mean_b == pytest.approx(1 / 2)  # query 1 scores 0 for b


def test_unknown_measure_is_refused():
    with pytest.raises(ValueError, match="no per-query values for 'P_10'"):
        paired_ttest(per_query(QRELS, RUN_A), per_query(QRELS, RUN_B), "P_10")


def test_per_query_layout():
    frame = per_query(QRELS, {"1": RUN_A["1"], "3": RUN_A["3"]}, ["recip_rank", "gdeval_err@1"], complete=True)
    assert list(frame.columns) == ["qid", "measure", "value"]
    assert frame.to_records(index=False).tolist() == [
        ("1", "recip_rank", 1.0),
        ("3", "recip_rank", 0.5),
        ("2", "recip_rank", 0.0),  # absent from the run; -c counts it as 0
        ("1", "gdeval_err@1", 1 / 16),
        ("3", "gdeval_err@1", 0.0),
        ("2", "gdeval_err@1", 0.0),
    ]
    wide = frame.pivot(index="qid", columns="measure", values="value")
    assert wide.loc["3", "recip_rank"] == 0.5


def test_real_runs_match_scipy_on_the_per_query_values(shared_data):
    """BM25 vs BM25+RM3 on TREC DL 2019 passage, nDCG@10: the test is scipy's on the aligned values."""
    qrels = read_qrels(shared_data / "trec_dl/qrels/qrels.dl19-passage.txt")
    runs = shared_data / "trec_dl/runs/rank_llm_data_top100"
    a = per_query(qrels, read_run(runs / "BM25.trec_results_dl19_top100.txt"), ["ndcg_cut_10"])
    b = per_query(qrels, read_run(runs / "BM25_RM3.trec_results_dl19_top100.txt"), ["ndcg_cut_10"])
    result = paired_ttest(a, b, "ndcg_cut_10")
    aligned = a.merge(b, on=["qid", "measure"], suffixes=("_a", "_b"))
    expected = stats.ttest_rel(aligned["value_a"], aligned["value_b"])
    assert result.queries == 43
    assert (result.mean_a, result.mean_b) == pytest.approx((0.5058, 0.5216), abs=5e-5)  # published (Anserini)
    assert (result.statistic, result.pvalue) == pytest.approx((expected.statistic, expected.pvalue))
