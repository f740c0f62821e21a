"""`common.commands.outputs`: the run files, metrics.json (BM25 on the same queries) and task.json of a train or
evaluate command, with one test run (``run.trec``) or several cut to a depth (``run.<mode>.trec``), and the tables."""

import json

import pytest

from common.commands.outputs import metrics_table, nothing_to_compare, write_mode_results, write_results
from common.data.formats import read_run

QRELS = {"q1": {"d1": 1, "d2": 0, "d3": 0}}
#: BM25 puts the one relevant document third.
CANDIDATES = {"q1": {"d3": 3.0, "d2": 2.0, "d1": 1.0}}
MEASURES = ("recip_rank", "map")


def test_one_run_is_run_trec_beside_bm25_and_the_baselines(tmp_path):
    run = {"q1": {"d1": 3.0, "d2": 2.0, "d3": 1.0}}
    baseline = {"recip_rank": 0.5, "map": 0.5}
    metrics = write_results(tmp_path, "mine", run, QRELS, CANDIDATES, 1, measures=MEASURES, task="builtin:test",
                            dataset=None, others={"other": baseline})
    # relevant first: RR = AP = 1; BM25's third: RR = AP = 1/3
    assert metrics == {"mine": {"recip_rank": 1.0, "map": 1.0},
                       "bm25": {"recip_rank": pytest.approx(1 / 3), "map": pytest.approx(1 / 3)}, "other": baseline}
    assert list(metrics) == ["mine", "bm25", "other"]  # the printed table's order
    assert read_run(tmp_path / "run.trec") == run
    assert (tmp_path / "run.trec").read_text().split()[-1] == "mine"  # the run's tag
    assert json.loads((tmp_path / "metrics.json").read_text()) == metrics
    assert json.loads((tmp_path / "task.json").read_text()) == {"test": "builtin:test", "dataset": None}
    with pytest.raises(FileExistsError):  # never over a finished run's files
        write_results(tmp_path, "mine", run, QRELS, CANDIDATES, 1, measures=MEASURES, task="builtin:test",
                      dataset=None)
    write_results(tmp_path, "mine", run, QRELS, CANDIDATES, 1, measures=MEASURES, task="builtin:test", dataset=None,
                  overwrite=True)  # a resumed run's test, which a kill interrupted after its first files


def test_several_runs_are_cut_to_the_depth_and_so_is_bm25(tmp_path):
    runs = {"rerank": {"q1": {"d1": 3.0, "d2": 2.0, "d3": 1.0}}, "fullrank": {"q1": {"d2": 3.0, "d3": 2.0, "d1": 1.0}}}
    metrics = write_mode_results(tmp_path, "ndrm3", runs, QRELS, CANDIDATES, 1, measures=MEASURES,
                                 task="builtin:test", dataset=None, depth=2)
    assert list(metrics) == ["ndrm3-rerank", "ndrm3-fullrank", "bm25"]
    assert metrics["ndrm3-rerank"] == {"recip_rank": 1.0, "map": 1.0}
    # d1 is third in the full ranking and in BM25's: below the depth, found by neither (uncut: 1/3)
    assert metrics["ndrm3-fullrank"] == metrics["bm25"] == {"recip_rank": 0.0, "map": 0.0}
    assert read_run(tmp_path / "run.rerank.trec") == {"q1": {"d1": 3.0, "d2": 2.0}}
    assert read_run(tmp_path / "run.fullrank.trec") == {"q1": {"d2": 3.0, "d3": 2.0}}
    assert not (tmp_path / "run.trec").exists()


def test_without_qrels_the_runs_and_task_json_are_written_and_no_metrics(tmp_path):
    """A task without judgments: every query of the run written, task.json beside it, no metrics.json."""
    run = {"q1": {"d1": 3.0, "d2": 2.0, "d3": 1.0}, "q2": {"d4": 1.0}}
    task = {"topics_path": "t.tsv", "candidates_path": "r.trec", "collection_path": "c.jsonl"}
    assert write_results(tmp_path / "one", "mine", run, {}, CANDIDATES, 1, measures=MEASURES, task=task,
                         dataset=None) is None
    assert read_run(tmp_path / "one" / "run.trec") == run
    assert json.loads((tmp_path / "one" / "task.json").read_text()) == {"test": task, "dataset": None}
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == ["run.trec", "task.json"]
    runs = {"rerank": run, "fullrank": {"q1": {"d2": 3.0, "d3": 2.0, "d1": 1.0}}}
    assert write_mode_results(tmp_path / "modes", "ndrm3", runs, {}, CANDIDATES, 1, measures=MEASURES, task=task,
                              dataset=None, depth=2) is None
    assert read_run(tmp_path / "modes" / "run.rerank.trec") == {"q1": {"d1": 3.0, "d2": 2.0}, "q2": {"d4": 1.0}}
    assert sorted(p.name for p in (tmp_path / "modes").iterdir()) == ["run.fullrank.trec", "run.rerank.trec",
                                                                      "task.json"]


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_the_table_names_the_measures_as_told():
    metrics = {"a": {"map": 0.25, "recip_rank": 0.5}, "bm25": {"map": 0.125, "recip_rank": 1.0}}
    lines = metrics_table(metrics, "Title", ("map", "recip_rank")).splitlines()
    assert lines[:2] == ["Title", ""] and cells(lines[2]) == ["run", "MAP", "MRR"]
    assert [cells(line) for line in lines[4:]] == [["a", "0.25", "0.5"], ["bm25", "0.125", "1"]]
    table_1 = metrics_table(metrics, "Title", ("recip_rank",), {"recip_rank": "RR"}).splitlines()
    assert cells(table_1[2]) == ["run", "RR"]


def test_nothing_to_compare_names_the_task():
    assert nothing_to_compare("builtin:test", "is none of its datasets (x)") == (
        "Nothing in the paper to compare with: builtin:test is none of its datasets (x).")
