"""gdeval.pl 1.3's nDCG@k and ERR@k: its CSV outputs topic by topic, and its rules on small cases."""

from __future__ import annotations

import csv
import functools
import math
from pathlib import Path

import pytest

from common.data.formats import read_qrels, read_run
from common.metrics import evaluate, evaluate_run
from common.metrics.gdeval import gdeval_err, gdeval_ndcg, gdeval_topic
from tests.conftest import SHARED_DATA


def gdeval_cases(data: Path) -> list[tuple[str, str, str, int]]:
    """(csv, qrels, run, k) for every gdeval output in shared/data."""
    cases = []
    for path in sorted(data.glob("trec_eval_test/generated_gdeval/*.csv")):
        qrels, run = path.name.split(".gdeval")[0].split("__")
        cases.append((path, f"trec_eval_test/inputs/{qrels}", f"trec_eval_test/inputs/{run}"))
    for path in sorted(data.glob("trec_dl/generated_gdeval/*.csv")):
        run = path.name.split(".gdeval")[0] + ".txt"
        folder = "trec_dl/runs/rank_llm_data_top100" if "_top100" in run else "trec_dl/runs"
        year = "dl19" if "dl19" in run else "dl20"
        cases.append((path, f"trec_dl/qrels/qrels.{year}-passage.txt", f"{folder}/{run}"))
    return [(str(p.relative_to(data)), q, r, int(p.name.split(".k")[-1].split(".")[0])) for p, q, r in cases]


def pytest_generate_tests(metafunc):
    if "gdeval_case" in metafunc.fixturenames:
        data = SHARED_DATA  # what the shared_data fixture serves; parametrising needs it at collection
        cases = gdeval_cases(data) if data.is_dir() else []
        metafunc.parametrize("gdeval_case", cases, ids=[Path(case[0]).name for case in cases])


@functools.cache
def inputs(data: Path, qrels: str, run: str):
    return read_qrels(data / qrels), read_run(data / run)


def test_gdeval_csv_per_topic_and_amean(shared_data, gdeval_case):
    output, qrels, run, k = gdeval_case
    results = evaluate(*inputs(shared_data, qrels, run), [f"gdeval_ndcg@{k}", f"gdeval_err@{k}"])
    ndcg, err = results[f"gdeval_ndcg@{k}"], results[f"gdeval_err@{k}"]
    with open(shared_data / output, newline="") as f:
        expected = [(row["topic"], row[f"ndcg@{k}"], row[f"err@{k}"]) for row in csv.DictReader(f)]
    ours = [(topic, ndcg.format(value), err.format(err.values[topic])) for topic, value in ndcg.values.items()]
    ours.append(("amean", ndcg.format(ndcg.summary), err.format(err.summary)))
    assert ours == expected  # same topics, in gdeval's numeric order, same 5-decimal values


def test_every_gdeval_output_is_covered(shared_data):
    assert len(gdeval_cases(shared_data)) == 33


def test_topic_ids_lose_everything_up_to_the_last_dash(shared_data):
    """TREC RAG 2024 ids such as 2024-127266 are reported as 127266, as gdeval.pl prints them."""
    results = evaluate(
        *inputs(shared_data, "trec_eval_test/inputs/qrels.comment.test", "trec_eval_test/inputs/results.comment.test"),
        ["gdeval_ndcg@10"],
    )
    assert "127266" in results["gdeval_ndcg@10"].values
    assert gdeval_topic("2024-127266") == "127266" and gdeval_topic("a-b-7") == "7"


# --- hand-worked example --------------------------------------------------------
# Query 1 judges d1=3, d2=0, d3=1, d4=-1, d5=2; the run ranks d2, d1, d3.
# Gains in rank order (negative and unjudged -> 0): [0, 3, 1]; judged labels > 0: [3, 2, 1].
#   DCG@3   = (2^0-1)/log2(2) + (2^3-1)/log2(3) + (2^1-1)/log2(4) = 7/log2(3) + 1/2
#   IDCG@3  = 7/log2(2) + 3/log2(3) + 1/log2(4)                   = 7 + 3/log2(3) + 1/2
#   ERR@3 with R = (2^g - 1)/16: 0 + (1-0)*(7/16)/2 + (1-0)*(1-7/16)*(1/16)/3 = 7/32 + 9/768 = 177/768
QRELS = {"1": {"d1": 3, "d2": 0, "d3": 1, "d4": -1, "d5": 2}}
RUN = {"1": {"d2": 3.0, "d1": 2.0, "d3": 1.0}}


def test_hand_worked_ndcg_and_err():
    values = evaluate_run(QRELS, RUN, ["gdeval_ndcg@3", "gdeval_err@3", "gdeval_ndcg@1", "gdeval_err@1"])
    assert values["gdeval_ndcg@3"] == pytest.approx((7 / math.log2(3) + 1 / 2) / (7 + 3 / math.log2(3) + 1 / 2))
    assert values["gdeval_err@3"] == pytest.approx(177 / 768)
    assert values["gdeval_ndcg@1"] == 0.0 and values["gdeval_err@1"] == 0.0  # d2 is judged 0


def test_err_normalises_by_2_to_the_4_whatever_the_largest_label():
    assert gdeval_err([4], [4], 1) == 15 / 16
    assert gdeval_err([1], [1], 1) == 1 / 16
    assert gdeval_ndcg([1], [1], 1) == 1.0


def test_ties_break_by_docid_descending():
    qrels = {"1": {"a": 1}}
    values = evaluate_run(qrels, {"1": {"a": 1.0, "b": 1.0}}, ["gdeval_err@1", "gdeval_ndcg@2"])
    assert values["gdeval_err@1"] == 0.0  # "b" > "a": b is ranked first
    assert values["gdeval_ndcg@2"] == pytest.approx(1 / math.log2(3))


def test_scores_are_compared_in_double_precision():
    """Unlike trec_eval 9.0.8 (float32), gdeval.pl tells 1 + 1e-9 from 1."""
    values = evaluate_run({"1": {"a": 1}}, {"1": {"a": 1.0 + 1e-9, "b": 1.0}}, ["gdeval_err@1", "recip_rank"])
    assert values["gdeval_err@1"] == 1 / 16
    assert values["recip_rank"] == 0.5  # trec_eval sees a tie, broken by docid: b first


def test_topics_without_positive_label_are_skipped_and_complete_counts_absent_ones():
    qrels = {"1": {"a": 1}, "2": {"b": 0, "c": -1}, "3": {"d": 2}}
    run = {"1": {"a": 1.0}, "2": {"b": 1.0}, "4": {"a": 1.0}}
    plain = evaluate(qrels, run, ["gdeval_ndcg@10"])["gdeval_ndcg@10"]
    assert plain.values == {"1": 1.0} and plain.summary == 1.0  # 2 has no label > 0; 4 is not judged
    complete = evaluate(qrels, run, ["gdeval_ndcg@10"], complete=True)["gdeval_ndcg@10"]
    assert complete.missing == {"3": 0.0} and complete.summary == 0.5  # averaged over topics 1 and 3


def test_depth_cuts_the_ranking_but_not_the_ideal():
    values = evaluate_run(QRELS, RUN, ["gdeval_ndcg@3"], depth=2)
    assert values["gdeval_ndcg@3"] == pytest.approx((7 / math.log2(3)) / (7 + 3 / math.log2(3) + 1 / 2))


def test_queries_sharing_a_topic_id_are_merged_as_gdeval_does():
    qrels = {"2023-5": {"a": 1}, "2024-5": {"b": 2}}
    run = {"2023-5": {"a": 2.0}, "2024-5": {"b": 1.0}}
    result = evaluate(qrels, run, ["gdeval_ndcg@2"])["gdeval_ndcg@2"]
    assert list(result.values) == ["5"]
    assert result.summary == pytest.approx((1 + 3 / math.log2(3)) / (3 + 1 / math.log2(3)))


@pytest.mark.parametrize(
    ("qrels", "run", "message"),
    [
        ({"q1": {"a": 1}}, {"q1": {"a": 1.0}}, "numeric topic ids"),
        ({"1": {"a": 5}}, {"1": {"a": 1.0}}, "labels up to 4"),
        ({"05": {"a": 1}}, {"5": {"a": 1.0}}, "same number"),
        ({"1-5": {"a": 1}, "2-5": {"a": 2}}, {"5": {"a": 1.0}}, "share document"),
    ],
)
def test_inputs_gdeval_refuses_or_cannot_resolve(qrels, run, message):
    with pytest.raises(ValueError, match=message):
        evaluate_run(qrels, run, ["gdeval_err@10"])
