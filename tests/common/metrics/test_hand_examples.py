"""trec_eval measures, NCG and trec_eval's -l / -c / -M on examples small enough to work out by hand."""

from __future__ import annotations

import math
import random

import pytest

from common.metrics import evaluate, evaluate_run, parse_measures
from common.metrics.ordering import cut_run, trec_eval_ranking

# Query 1 judges d1=3, d2=0, d3=1, d4=-1, d5=2; the run ranks d2, d1, d3 (scores 3, 2, 1).
# At relevance level 1 the relevant documents are d1, d3, d5 (R = 3), retrieved at ranks 2 and 3:
#   recip_rank = 1/2;  AP = (1/2 + 2/3) / 3 = 7/18;  P_3 = recall_3 = 2/3;  P_5 = 2/5 (trec_eval divides by 5)
#   ndcg_cut_3, gain = label: (0/log2(2) + 3/log2(3) + 1/log2(4)) / (3/log2(2) + 2/log2(3) + 1/log2(4))
# At level 2 only d1 and d5 are relevant (R = 2): recip_rank = 1/2, AP = (1/2) / 2 = 1/4, P_3 = 1/3.
# NCG@k (gain = label, no discount): @3 (0+3+1)/(3+2+1) = 2/3, @2 (0+3)/(3+2) = 3/5, @1 0/3.
QRELS = {"1": {"d1": 3, "d2": 0, "d3": 1, "d4": -1, "d5": 2}}
RUN = {"1": {"d2": 3.0, "d1": 2.0, "d3": 1.0}}


def test_binary_measures_at_level_1():
    values = evaluate_run(QRELS, RUN, ["recip_rank", "map", "P_3", "P_5", "recall_3", "num_rel", "num_rel_ret"])
    assert values == pytest.approx(
        {
            "recip_rank": 1 / 2,
            "map": 7 / 18,
            "P_3": 2 / 3,
            "P_5": 2 / 5,
            "recall_3": 2 / 3,
            "num_rel": 3,
            "num_rel_ret": 2,
        }
    )


def test_relevance_level_2():
    values = evaluate_run(QRELS, RUN, ["recip_rank", "map", "P_3", "num_rel"], relevance_level=2)
    assert values == pytest.approx({"recip_rank": 1 / 2, "map": 1 / 4, "P_3": 1 / 3, "num_rel": 2})
    assert evaluate_run(QRELS, RUN, ["recip_rank", "map"], relevance_level=4) == {"recip_rank": 0.0, "map": 0.0}


def test_ndcg_uses_labels_as_gains_whatever_the_level():
    expected = (3 / math.log2(3) + 1 / 2) / (3 + 2 / math.log2(3) + 1 / 2)
    for level in (1, 2):
        assert evaluate_run(QRELS, RUN, ["ndcg_cut_3"], relevance_level=level)["ndcg_cut_3"] == pytest.approx(expected)


def test_ncg():
    values = evaluate_run(QRELS, RUN, ["ncg@3", "ncg@2", "ncg@1"])
    assert values == pytest.approx({"ncg@3": 2 / 3, "ncg@2": 3 / 5, "ncg@1": 0.0})


def test_depth_cuts_each_ranking():
    values = evaluate_run(QRELS, RUN, ["P_3", "map", "num_ret", "ncg@3"], depth=2)  # d2, d1 remain
    assert values == pytest.approx({"P_3": 1 / 3, "map": (1 / 2) / 3, "num_ret": 2, "ncg@3": 3 / 6})


def test_mrr_at_k_is_recip_rank_on_the_top_k():
    assert evaluate_run(QRELS, RUN, ["mrr@1", "mrr@2", "mrr@10"]) == {"mrr@1": 0.0, "mrr@2": 0.5, "mrr@10": 0.5}
    assert evaluate_run(QRELS, RUN, ["mrr@10"], depth=1) == {"mrr@10": 0.0}  # the global -M applies too


# -c: query 2 is judged but absent from the run, query 3 is judged without any relevant document,
# query 9 is retrieved but not judged (ignored either way).
QRELS_3 = {**QRELS, "2": {"x": 1, "y": 0}, "3": {"z": 0}}
RUN_2 = {**RUN, "9": {"x": 1.0}}


def test_without_complete_only_queries_in_both_count():
    values = evaluate_run(QRELS_3, RUN_2, ["num_q", "map", "num_rel", "gm_map"])
    assert values == pytest.approx({"num_q": 1, "map": 7 / 18, "num_rel": 3, "gm_map": 7 / 18})


def test_complete_averages_over_every_qrels_query():
    values = evaluate_run(QRELS_3, RUN_2, ["num_q", "num_ret", "map", "num_rel", "gm_map", "ncg@3"], complete=True)
    assert values == pytest.approx(
        {
            "num_q": 3,  # every query of the qrels, relevant documents or not (trec_eval: num_q_rels)
            "num_ret": 3,
            "map": (7 / 18) / 3,
            "num_rel": 3 + 1 + 0,  # absent queries' relevant documents count
            "gm_map": math.exp((math.log(7 / 18) + 2 * math.log(1e-5)) / 3),  # MIN_GEO_MEAN for absent ones
            "ncg@3": (2 / 3) / 2,  # NCG counts the queries with a label > 0: 1 and 2
        }
    )


def test_complete_reports_the_implied_values_separately():
    result = evaluate(QRELS_3, RUN_2, ["map", "num_rel"], complete=True)
    assert list(result["map"].values) == ["1"] and result["map"].missing == {"2": 0.0, "3": 0.0}
    assert result["num_rel"].missing == {"2": 1.0, "3": 0.0}


# trec_eval 9.0.8 reads scores into a C float: 1 + 1e-9 and 1 tie, and the tie goes to the larger docid.
FLOAT32_TIE = {"1": {"a": 1.0 + 1e-9, "b": 1.0, "c": 0.5}}


def test_float32_ties_are_broken_by_docid_as_trec_eval_does():
    qrels = {"1": {"a": 1}}
    assert trec_eval_ranking(FLOAT32_TIE["1"]) == ["b", "a", "c"]
    assert evaluate_run(qrels, FLOAT32_TIE, ["recip_rank", "mrr@1"]) == {"recip_rank": 0.5, "mrr@1": 0.0}
    assert evaluate_run(qrels, FLOAT32_TIE, ["P_1"], depth=1) == {"P_1": 0.0}
    assert cut_run(FLOAT32_TIE, 1) == {"1": {"b": 1.0}}


def test_depth_cut_agrees_with_pytrec_eval_ordering_on_near_ties():
    """A measure at cutoff k is the same with or without -M k only if our cut keeps
    exactly the documents pytrec_eval (trec_eval) ranks first: ties in float32 included."""
    rng = random.Random(7)
    qrels, run = {}, {}
    for q in range(30):
        docs = [f"d{rng.randrange(1000):03d}" for _ in range(40)]
        run[str(q)] = {doc: 1.0 + rng.randrange(4) * 1e-9 + rng.randrange(3) for doc in docs}
        qrels[str(q)] = {doc: rng.randrange(-1, 4) for doc in docs[::2]}
    for k in (1, 2, 3, 5, 10):
        names = [f"P_{k}", f"ndcg_cut_{k}", f"map_cut_{k}", f"success_{k}"]
        assert evaluate_run(qrels, run, names, depth=k) == evaluate_run(qrels, run, names)


def test_queries_without_documents_or_judgments_are_ignored():
    assert evaluate_run({**QRELS, "2": {}}, {**RUN, "2": {}}, ["num_q", "map"]) == pytest.approx(
        {"num_q": 1, "map": 7 / 18}
    )


@pytest.mark.parametrize(
    ("names", "printed"),
    [
        (["ndcg_cut.10"], ["ndcg_cut_10"]),
        (["ndcg_cut_10", "ndcg_cut.10,20"], ["ndcg_cut_10", "ndcg_cut_20"]),
        (["recall.100,1000"], ["recall_100", "recall_1000"]),
        (["P"], ["P_5", "P_10", "P_15", "P_20", "P_30", "P_100", "P_200", "P_500", "P_1000"]),
        (["success"], ["success_1", "success_5", "success_10"]),
        (["iprec_at_recall_0.10", "Rprec_mult.0.5"], ["iprec_at_recall_0.10", "Rprec_mult_0.50"]),
        (["map", "map", "mrr@10", "gdeval_err@20", "ncg@100"], ["map", "mrr@10", "gdeval_err@20", "ncg@100"]),
    ],
)
def test_measure_names(names, printed):
    assert list(evaluate_run({"1": {"a": 1}}, {"1": {"a": 1.0}}, names)) == printed


def test_a_family_with_and_without_parameters():
    values = evaluate_run(QRELS, RUN, ["P", "P_7"])
    assert values["P_7"] == pytest.approx(2 / 7) and values["P_5"] == pytest.approx(2 / 5) and len(values) == 10


def test_groups():
    assert len(parse_measures(["all_trec"])) == 32
    assert [r.measure.name for r in parse_measures(["official"])][:5] == [
        "num_q",
        "num_ret",
        "num_rel",
        "num_rel_ret",
        "map",
    ]


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("foo", "unknown measure 'foo'"),
        ("map.5", "takes no parameters"),
        ("P.x", "must be a positive integer"),
        ("P.0", "must be a positive integer"),
        ("ndcg_cut.2.5", "must be a positive integer"),
        ("mrr@0", "at least 1"),
        ("bar@5", "unknown measure 'bar@5'"),
        ("relstring", "unknown measure"),
    ],
)
def test_bad_measure_names(name, message):
    with pytest.raises(ValueError, match=message):
        parse_measures([name])


def test_trec_eval_refuses_a_run_without_judged_queries():
    with pytest.raises(ValueError, match="no query has both results and relevance judgments"):
        evaluate_run(QRELS, {"2": {"a": 1.0}}, ["map"])
    with pytest.raises(ValueError, match="depth"):
        evaluate_run(QRELS, RUN, ["map"], depth=0)
