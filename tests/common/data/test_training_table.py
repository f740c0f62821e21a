"""common.data.training_table: a task's qrels and candidates as mapped columns, laid out as worked by hand; the
samplers draw from it the very groups they drew from the dicts before it existed (golden digests), and an
ir_datasets task is streamed into the cache once and read back mapped."""

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from common.data.formats import DataFormatError, write_collection, write_qrels, write_run, write_topics
from common.data.irds import IrDatasetsSource
from common.data.samplers import from_source
from common.data.specs import source_from_spec
from common.data.training_table import TrainingTable
from tests.common.data.test_irds import MarcoDoc

QRELS = {"q2": {"b": 1, "a": 0, "é": 2}, "q10": {"c": 1}}
RUN = {"q10": {"a": 1.0, "c": 1.0 + 1e-9, "b": 3.0}, "q2": {"é": 0.5, "zz": 0.5, "b": 2.0}, "q3": {"a": 1.0}}


def test_the_layout_worked_by_hand():
    table = TrainingTable.from_dicts(QRELS, RUN)
    assert table.queries.tolist() == [b"q10", b"q2", b"q3"]  # sorted as strings: "q10" < "q2"
    assert table.docs.tolist() == [b"a", b"b", b"c", b"zz", "é".encode()]  # UTF-8 order is code point order
    # q10: b (3.0), then c and a tie in float32 (1 + 1e-9 rounds to 1): doc id descending, c before a.
    # q2: b (2.0), then é and zz tie at 0.5: é (U+00E9) above zz.  q3: a.
    assert table.candidate_offsets.tolist() == [0, 3, 6, 7]
    assert table.candidate_docs.tolist() == [1, 2, 0, 1, 4, 3, 0]
    assert table.qrel_offsets.tolist() == [0, 1, 4, 4]
    assert table.qrel_docs.tolist() == [2, 0, 1, 4] and table.qrel_labels.tolist() == [1, 0, 1, 2]
    assert table.judged_queries().tolist() == [0, 1]
    assert table.doc_ids(table.candidates(1, depth=2)) == ["b", "é"]
    assert table.labels(1, table.candidates(1)).tolist() == [1, 2, 0]
    assert table.labels(2, table.candidates(2)).tolist() == [0]  # q3: no judgments
    assert table.candidate_docs.dtype == np.int32 and table.candidate_offsets.dtype == np.int64


def test_saved_tables_are_opened_mapped(tmp_path):
    TrainingTable.from_dicts(QRELS, RUN).save(tmp_path / "t", {"test": 1})
    assert TrainingTable.is_saved(tmp_path / "t") and not TrainingTable.is_saved(tmp_path)
    table = TrainingTable.open(tmp_path / "t")
    assert isinstance(table.candidate_docs, np.memmap) and isinstance(table.docs, np.memmap)
    assert table.meta == {"format": 1, "source": {"test": 1}, "queries": 3, "documents": 5, "candidates": 7,
                          "judgments": 4}
    assert table.doc_ids(table.candidates(0)) == ["b", "c", "a"]
    # 4 bytes a candidate, and the offsets per query
    assert (tmp_path / "t" / "candidate_docs.npy").stat().st_size == 128 + 7 * 4


@pytest.mark.parametrize("qrels, run, message", [
    ({"q": {"a": 1}}, {"q": {"a": float("nan")}}, "NaN score"),
])  # fmt: skip
def test_nan_scores_are_refused(qrels, run, message):
    with pytest.raises(DataFormatError, match=message):
        TrainingTable.from_dicts(qrels, run)


# --- the same groups as the samplers drew from dicts ---------------------------------------------------------------

GOLDEN = json.loads((Path(__file__).parent / "golden_sampler_groups.json").read_text())
SHARED = Path(__file__).parents[3].parent / "shared" / "data" / "trec_dl"
SAMPLERS = {
    "pointwise": ("pointwise", {"negatives": 1}),
    "pointwise-candidates": ("pointwise", {"negatives": 1, "positives": "candidates"}),
    "softmax-depth10": ("softmax", {"negatives": 7, "depth": 10}),
    "pairwise-level2": ("pairwise", {"relevance_level": 2}),
    "label_groups": ("label_groups", {"group_size": 4}),
}


def builtin_files(folder: Path) -> dict:
    """The built-in training task written as TREC files: a task from files."""
    builtin = source_from_spec("builtin:train")
    files = {"topics_path": folder / "topics.tsv", "qrels_path": folder / "qrels.txt",
             "candidates_path": folder / "run.txt", "collection_path": folder / "docs.tsv"}
    write_topics(files["topics_path"], builtin.topics())
    write_qrels(files["qrels_path"], builtin.qrels())
    write_run(files["candidates_path"], builtin.candidates(), tag="bm25")
    write_collection(files["collection_path"], builtin.documents().documents())
    return {key: str(path) for key, path in files.items()}


def digests(source) -> dict:
    found = {}
    for name, (kind, options) in SAMPLERS.items():
        sampler = from_source(kind, source, seed=3, **options)
        for epoch in (0, 1):
            groups = [[g.qid, list(g.doc_ids), list(g.labels), [list(p) for p in g.pairs]]
                      for g in sampler.examples(epoch)]
            found[f"{name}/{epoch}"] = {"groups": len(groups), "first": groups[0],
                                        "sha256": hashlib.sha256(json.dumps(groups).encode()).hexdigest(),
                                        "stats": list(sampler.stats.__dict__.values())}
    return found


@pytest.mark.parametrize("task", ["builtin", "files", "rank_llm"])
def test_the_samplers_draw_the_groups_they_drew_from_dicts(task, tmp_path):
    """``golden_sampler_groups.json`` holds the sha256 of every group of every epoch that the dict-based samplers
    drew (commit a4b0e00, before the table) for the same seed, five samplers on three tasks."""
    if task == "rank_llm":
        if not SHARED.is_dir():
            pytest.skip(f"real evaluation data not found at {SHARED} (shared/ beside the checkout)")
        spec = {"rank_llm_path": str(SHARED / "candidates_with_text/rank_llm.BM25.retrieve_results_dl19.json"),
                "qrels_path": str(SHARED / "qrels/qrels.dl19-passage.txt")}
    else:
        spec = "builtin:train" if task == "builtin" else builtin_files(tmp_path)
    expected = {key.split("/", 1)[1]: value for key, value in GOLDEN.items() if key.startswith(f"{task}/")}
    assert digests(source_from_spec(spec)) == expected


# --- an ir_datasets task, streamed into the cache ------------------------------------------------------------------


def builtin_dataset(folder: Path):
    """The built-in training task as an ir_datasets dataset of local files (scoreddocs with ties included)."""
    from ir_datasets.datasets.base import Dataset
    from ir_datasets.formats import TrecQrels, TrecScoredDocs, TsvDocs, TsvQueries
    from ir_datasets.util import LocalDownload

    builtin = source_from_spec("builtin:train")
    paths = {name: folder / name for name in ("queries.tsv", "qrels.txt", "run.txt", "docs.tsv")}
    paths["queries.tsv"].write_text("".join(f"{q}\t{t}\n" for q, t in builtin.topics().items()))
    write_qrels(paths["qrels.txt"], builtin.qrels())
    run = {qid: {d: round(score, 1) for d, score in scores.items()} for qid, scores in builtin.candidates().items()}
    write_run(paths["run.txt"], run)  # scores cut to one decimal: many ties, broken by doc id
    paths["docs.tsv"].write_text("".join(f"{d.doc_id}\thttp://x/{d.doc_id}\t{d.title}\t{d.text}\n"
                                         for d in builtin.documents().documents()))
    dataset = Dataset(TsvQueries(LocalDownload(paths["queries.tsv"])),
                      TrecQrels(LocalDownload(paths["qrels.txt"]), {0: "not", 1: "relevant", 2: "highly"}),
                      TrecScoredDocs(LocalDownload(paths["run.txt"])),
                      TsvDocs(LocalDownload(paths["docs.tsv"]), doc_cls=MarcoDoc))
    return dataset, run


def test_an_ir_datasets_task_is_streamed_into_the_cache_once(tmp_path, register, monkeypatch):
    monkeypatch.setenv("EFFICIENT_RANKERS_CACHE", str(tmp_path / "cache"))
    dataset, run = builtin_dataset(tmp_path)
    source = IrDatasetsSource(register(dataset))
    table = source.training_table()
    assert isinstance(table.candidate_docs, np.memmap)
    assert len([p for p in (tmp_path / "cache" / "training").iterdir() if p.is_dir()]) == 1
    assert table.meta["source"] == {"ir_datasets": source.dataset_id} and table.meta["candidates"] == 600 * 100
    with monkeypatch.context() as patched:
        patched.setattr("common.data.training_table.TableBuilder", None)  # opened, not built again
        source.training_table()
    ids = source.collection_ids()
    assert isinstance(ids, np.memmap) and [d.decode() for d in ids.tolist()] == list(source.documents())

    from common.data import samplers

    for name, (kind, options) in SAMPLERS.items():  # the streamed table draws what the dicts draw
        streamed = from_source(kind, source, seed=5, **options)
        cls = type(streamed)
        extra = {"collection_ids": list(source.documents())} if kind in ("pairwise", "label_groups") else {}
        from_dicts = cls.of(source.qrels(), run, topics=source.topics(), seed=5, **options, **extra)
        assert streamed.examples(0) == from_dicts.examples(0), name
        assert streamed.stats == from_dicts.stats
    assert samplers.training_table(source).meta == table.meta
