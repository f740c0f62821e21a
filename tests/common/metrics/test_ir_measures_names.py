"""ir_measures' measure names: each equals what ir_measures 0.4.3 computes under that name, on a hand-made
qrels/run with tied scores, absent queries and a query without relevant documents, and on shared/data's pairs."""

from __future__ import annotations

import re

import pytest

from common.data.formats import read_qrels, read_run
from common.evaluate import main
from common.metrics import evaluate_run, parse_measures

ir_measures = pytest.importorskip("ir_measures")

NAMES = [
    "nDCG@10", "nDCG", "NDCG@2", "AP", "AP(rel=2)", "MAP(rel=2)", "AP@2", "RR", "RR(rel=2)", "RR@10", "RR@1",
    "RR(rel=2)@10", "MRR(rel=2)@2", "R@1000", "R(rel=2)@2", "Recall@1", "P@10", "P(rel=2)@2", "Precision@1",
    "Success@1", "Success(rel=2)@2", "Bpref", "BPref(rel=2)",
]

# q1: b (2.0) above a and c tied at 1.0; q2 judged but absent from the run; q3 judged, none relevant; q9 unjudged.
QRELS = {"q1": {"a": 1, "b": 0, "c": 2, "d": 1}, "q2": {"x": 1}, "q3": {"y": 0}}
RUN = {"q1": {"a": 1.0, "c": 1.0, "b": 2.0, "e": 0.5}, "q3": {"y": 1.0}, "q9": {"z": 3.0}}

SHARED_PAIRS = [
    ("trec_eval_test/inputs/qrels.test", "trec_eval_test/inputs/results.test"),
    ("trec_eval_test/inputs/qrels.rel_level", "trec_eval_test/inputs/results.test"),
    ("trec_eval_test/inputs/qrels-302.test", "trec_eval_test/inputs/results-302.test"),
    ("trec_dl/qrels/qrels.dl19-passage.txt", "trec_dl/runs/run.msmarco-v1-passage.bm25-default.dl19.txt"),
    ("trec_dl/qrels/qrels.dl20-passage.txt", "trec_dl/runs/rank_llm_data_top100/BM25.trec_results_dl20_top100.txt"),
]


def reference(names, qrels, run) -> dict[str, float]:
    parsed = {name: ir_measures.parse_measure(name) for name in names}
    values = ir_measures.calc_aggregate(list(parsed.values()), qrels, run)
    return {name: values[measure] for name, measure in parsed.items()}


@pytest.mark.parametrize("complete", [False, True])
@pytest.mark.parametrize("level", [1, 2])
def test_names_equal_ir_measures_whatever_the_evaluations_level_and_complete(level, complete):
    ours = evaluate_run(QRELS, RUN, NAMES, relevance_level=level, complete=complete)
    assert ours == pytest.approx(reference(NAMES, QRELS, RUN), abs=1e-12)


@pytest.mark.parametrize(("qrels", "run"), SHARED_PAIRS)
def test_names_equal_ir_measures_on_shared_data(shared_data, qrels, run):
    qrels, run = read_qrels(shared_data / qrels), read_run(shared_data / run)
    assert evaluate_run(qrels, run, NAMES) == pytest.approx(reference(NAMES, qrels, run), abs=1e-12)


def test_hand_worked_values():
    """q1 ranked b, then a/c tied, then e; counted: q1, q2 (absent) and q3 (no relevant document)."""
    values = evaluate_run(QRELS, RUN, ["RR(rel=2)@2", "mrr@2", "AP(rel=2)", "AP", "nDCG@10"], relevance_level=2)
    # ir_measures' RR@K ranks the tie a, c (docid ascending): c (label 2) is third, beyond 2.
    assert values["RR(rel=2)@2"] == 0.0
    # trec_eval ranks it c, a: c second; mrr@2 averages over the run's judged queries q1, q3.
    assert values["mrr@2"] == pytest.approx(0.5 / 2)
    # rel=2: c at rank 2 of 1 relevant -> AP 1/2, over 3 queries.
    assert values["AP(rel=2)"] == pytest.approx(0.5 / 3)
    # AP's rel defaults to 1 whatever -l says: relevant a, c, d; c at 2 (1/2), a at 3 (2/3), d not retrieved.
    assert values["AP"] == pytest.approx((1 / 2 + 2 / 3) / 3 / 3)


def test_a_name_takes_its_own_relevance_level_and_prints_as_given():
    (request,) = parse_measures(["AP(rel=2)"])
    fields = (request.measure.name, request.relevance_level, request.complete, request.alias)
    assert fields == ("map", 2, True, "AP(rel=2)")
    (request,) = parse_measures(["nDCG@10"])
    assert (request.spec, request.alias) == ("ndcg_cut.10", "nDCG@10")


@pytest.mark.parametrize(("name", "message"), [
    ("P", None),  # trec_eval's P family: not ir_measures' P (which needs a cutoff)
    ("P(rel=2)", "P needs a cutoff, e.g. P@10"),
    ("nDCG(rel=2)@10", "parameters accepted here: none"),
    ("RR(judged_only=True)@10", "parameters accepted here: rel=N"),
    ("Bpref@10", "Bpref takes no @K"),
    ("AP@0", "the cutoff must be at least 1"),
    ("ERR@10", "unknown measure 'ERR@10'"),
    ("Rprec(rel=2)", "unknown measure 'Rprec(rel=2)'"),
])
def test_refusals(name, message):
    if message is None:
        assert [r.spec for r in parse_measures([name])] == ["P"]
        return
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_measures([name])


def test_command_line_prints_the_names_and_refuses_unknown_ones_listing_them(tmp_path, capsys):
    qrels, run = tmp_path / "qrels", tmp_path / "run"
    qrels.write_text("".join(f"{q} 0 {d} {label}\n" for q, docs in QRELS.items() for d, label in docs.items()))
    run.write_text("".join(f"{q} Q0 {d} 0 {s} t\n" for q, docs in RUN.items() for d, s in docs.items()))
    assert main(["-m", "nDCG@10", "-m", "RR(rel=2)@10", str(qrels), str(run)]) == 0
    expected = reference(["nDCG@10", "RR(rel=2)@10"], QRELS, RUN)
    assert capsys.readouterr().out == "".join(f"{n:<22}\tall\t{v:.4f}\n" for n, v in expected.items())
    with pytest.raises(SystemExit) as exit_info:
        main(["-m", "nDCG@ten", str(qrels), str(run)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1
    assert "unknown measure 'nDCG@ten'" in err and "ir_measures' nDCG[@K], NDCG[@K], AP[@K]" in err and "P@K" in err
