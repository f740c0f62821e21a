"""Documents a task judges or retrieves but its collection lacks (`common.training.tasks`, ``missing_documents``):
counted when the task is opened, left out with a warning or stopped on, never met by a loader."""

import warnings

import numpy as np
import pytest
import torch

from common.data.formats import Document, write_collection, write_qrels, write_run, write_topics
from common.data.samplers import PointwiseSampler, training_table
from common.data.rerank import reranked_run
from common.training.tasks import LoaderConfig, MissingDocumentsError, RerankingDataModule, TaskConfig


def tasks_of(train=None, dev=None, test=None, depth: int = 3, relevance_level: int = 2,
             missing_documents: str = "skip") -> RerankingDataModule:
    return RerankingDataModule(TaskConfig(train, dev, test, depth, relevance_level=relevance_level,
                                          missing_documents=missing_documents), LoaderConfig(1, 1))


@pytest.fixture
def task(tmp_path, monkeypatch) -> dict:
    """q1 judges p1 (3), p2 (2), x1 (2), x2 (3) and n1 (0): x1, x2 have no text; its run retrieves x3 too."""
    monkeypatch.setenv("EFFICIENT_RANKERS_CACHE", str(tmp_path / "cache"))
    write_topics(tmp_path / "topics.tsv", {"q1": "a query", "q2": "another"})
    write_qrels(tmp_path / "qrels.txt", {"q1": {"p1": 3, "p2": 2, "x1": 2, "x2": 3, "n1": 0}, "q2": {"p1": 1}})
    write_run(tmp_path / "run.trec", {"q1": {"p1": 5.0, "x3": 4.0, "n1": 3.0, "p2": 2.0, "n2": 1.0},
                                      "q2": {"p1": 1.0, "n1": 0.5}})
    write_collection(tmp_path / "docs.jsonl", [Document(d, f"text {d}") for d in ("p1", "p2", "n1", "n2")])
    return {"topics_path": str(tmp_path / "topics.tsv"), "qrels_path": str(tmp_path / "qrels.txt"),
            "candidates_path": str(tmp_path / "run.trec"), "collection_path": str(tmp_path / "docs.jsonl")}


def test_training_leaves_them_out_with_a_warning_naming_how_many(task):
    data = tasks_of(train=task)
    with pytest.warns(UserWarning) as caught:
        source = data.source("train")
    message = str(caught[0].message)
    assert message.startswith(
        "data.train (topics): 2 of 4 relevant judged documents (label >= 2); 1 of 5 candidates have no text in its "
        "collection (e.g. x1, x2, x3): left out of training; data.missing_documents=error stops instead"
    ), message
    assert source.qrels()["q1"] == {"p1": 3, "p2": 2, "n1": 0}
    assert source.candidates()["q1"] == {"p1": 5.0, "n1": 3.0, "p2": 2.0, "n2": 1.0}
    sampler = PointwiseSampler(training_table(source), relevance_level=2)
    used = {d for epoch in range(5) for group in sampler.examples(epoch) for d in group.doc_ids}
    assert used <= {"p1", "p2", "n1", "n2"} and {"p1", "p2"} <= used
    from_dicts = PointwiseSampler.of(source.qrels(), source.candidates(), relevance_level=2)
    assert [sampler.examples(epoch) for epoch in range(3)] == [from_dicts.examples(epoch) for epoch in range(3)]
    table = training_table(source)  # saved beside the task's own table, mapped
    assert table.folder.name.startswith(training_table(source._source).folder.name + "-present-")
    assert isinstance(table.candidate_docs, np.memmap) and table.meta["candidates"] == 7 - 1
    assert data.source("train") is source  # opened, and checked, once


def test_error_stops_in_one_line(task):
    with pytest.raises(MissingDocumentsError) as error:
        tasks_of(train=task, missing_documents="error").source("train")
    text = str(error.value)
    assert "\n" not in text and text.endswith("(e.g. x1, x2, x3); data.missing_documents=skip leaves them out")


def test_an_unknown_policy_is_named():
    with pytest.raises(MissingDocumentsError, match="data.missing_documents: 'drop' is none of skip, error"):
        tasks_of(test="builtin:test", missing_documents="drop").check_tasks()


def test_evaluation_scores_only_documents_with_text_and_keeps_the_others_below(task):
    data = tasks_of(test=task, depth=3)
    with pytest.warns(UserWarning, match=r"data.test \(topics\): 1 of 3 candidates have no text .*\(e.g. x3\): left "
                                         r"out of re-ranking \(kept below, in first-stage order\)"):
        pairs = data.eval_pairs("test")
    assert pairs == [("q1", "p1"), ("q1", "n1"), ("q2", "p1"), ("q2", "n1")]  # top 3 of q1 less x3
    assert data.source("test").qrels()["q1"]["x1"] == 2  # evaluation qrels are never cut
    scores = torch.tensor([[0, 1.0], [1, 2.0], [2, 1.0], [3, 0.0]], dtype=torch.float64)
    run = reranked_run(pairs, scores, data.source("test").candidates())
    assert [d for d, _ in sorted(run["q1"].items(), key=lambda x: -x[1])] == ["n1", "p1", "x3", "p2", "n2"]


def test_a_complete_task_gives_no_warning():
    data = tasks_of(train="builtin:train", dev="builtin:dev", relevance_level=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        data.check_tasks()


def test_a_complete_collection_is_not_read_to_be_checked(monkeypatch):
    """ir_datasets sources (`complete_collection`) open without reading their qrels or candidates."""

    class Complete:
        complete_collection, name = True, "msmarco"

        def qrels(self):
            raise AssertionError("read")

        candidates = topics = documents = qrels

    monkeypatch.setattr("common.training.tasks.source_from_spec", lambda spec: Complete())
    data = tasks_of(train="irds:msmarco-document/train")
    assert isinstance(data.source("train"), Complete)
    from common.data.irds import IrDatasetsSource

    assert IrDatasetsSource.complete_collection
