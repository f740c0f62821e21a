"""common.data.training_table: a task's qrels and candidates as mapped columns, laid out as worked by hand; the
samplers draw from it the very groups they drew from the dicts before it existed (golden digests), and a task of
files and an ir_datasets task are streamed into the cache once and read back mapped."""

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from common.data.formats import (DataFormatError, read_qrels, read_run, write_collection, write_qrels, write_run,
                                 write_topics)
from common.data.irds import IrDatasetsSource
from common.data.samplers import from_source
from common.data.source import FileSource
from common.data.specs import source_from_spec
from common.data.training_table import ARRAYS, TrainingTable
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


def test_document_codes_and_the_table_without_some_worked_by_hand():
    table = TrainingTable.from_dicts(QRELS, RUN)  # docs a b c zz é = codes 0-4; queries q10 q2 q3
    every, q10 = np.ones(3, dtype=bool), np.array([True, False, False])
    assert table.relevant_documents(every, 1).tolist() == [1, 2, 4]  # b (q2: 1), c (q10: 1), é (q2: 2)
    assert table.relevant_documents(every, 2).tolist() == [4] and table.relevant_documents(q10, 1).tolist() == [2]
    assert table.candidate_documents(np.array([True, False, True])).tolist() == [0, 1, 2]  # q10: b c a; q3: a
    assert table.codes(["zz", "a"]).tolist() == [3, 0]
    with pytest.raises(KeyError, match="'nope' is not in the training table"):
        table.codes(["nope"])
    cut = table.without(np.array([1]))  # without b: as if neither file had named it
    assert cut.candidate_offsets.tolist() == [0, 2, 4, 5] and cut.candidate_docs.tolist() == [2, 0, 4, 3, 0]
    assert cut.qrel_offsets.tolist() == [0, 1, 3, 3]
    assert cut.qrel_docs.tolist() == [2, 0, 4] and cut.qrel_labels.tolist() == [1, 0, 2]
    assert cut.docs.tolist() == table.docs.tolist()  # codes kept


@pytest.mark.parametrize("qrels, run, message", [
    ({"q": {"a": 1}}, {"q": {"a": float("nan")}}, "NaN score"),
])
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


# --- a task of files, streamed into the cache --------------------------------------------------------------------


def test_a_task_of_files_is_streamed_into_the_cache_once(tmp_path, monkeypatch):
    """The streamed table is the one the dict readers' qrels and run make (scores with ties included); built once;
    a changed file makes a new one."""
    monkeypatch.setenv("EFFICIENT_RANKERS_CACHE", str(tmp_path / "cache"))
    files = builtin_files(tmp_path)
    tied = {qid: {d: round(score, 1) for d, score in scores.items()} for qid, scores in
            read_run(files["candidates_path"]).items()}
    write_run(files["candidates_path"], tied, overwrite=True)  # many ties, broken by doc id
    source = FileSource(**files)
    assert source.provides() == {"topics", "qrels", "candidates", "documents"}
    table = source.training_table()
    expected = TrainingTable.from_dicts(read_qrels(files["qrels_path"]), tied)
    for name in ARRAYS:
        assert np.array_equal(getattr(table, name), getattr(expected, name)), name
        assert getattr(table, name).dtype == getattr(expected, name).dtype, name
    assert isinstance(table.candidate_docs, np.memmap) and table.meta["candidates"] == sum(map(len, tied.values()))
    with monkeypatch.context() as patched:
        patched.setattr("common.data.source.TableBuilder", None)  # opened, not built again
        assert FileSource(**files).training_table().folder == table.folder
    with open(files["qrels_path"], "a") as f:
        f.write("q-new 0 d-new 1\n")
    assert FileSource(**files).training_table().meta["judgments"] == table.meta["judgments"] + 1
    assert len([p for p in (tmp_path / "cache" / "training").iterdir() if p.is_dir()]) == 2


def test_a_copy_of_the_files_elsewhere_finds_the_table_built(tmp_path, monkeypatch):
    """Keyed by the files' contents: a task staged per job (new paths, new times) is not tabled again."""
    import shutil

    monkeypatch.setenv("EFFICIENT_RANKERS_CACHE", str(tmp_path / "cache"))
    (tmp_path / "topics.tsv").write_text("q1\tone\nq2\ttwo\n")
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\nq2 0 d3 2\n")
    (tmp_path / "run.txt").write_text("q1 Q0 d1 1 2.0 r\nq1 Q0 d2 2 1.0 r\nq2 Q0 d2 1 5.0 r\nq2 Q0 d3 2 4.0 r\n")
    table = FileSource(tmp_path / "topics.tsv", tmp_path / "qrels.txt", tmp_path / "run.txt").training_table()
    assert table.meta["candidates"] == 4 and table.meta["judgments"] == 2
    staged = tmp_path / "job-2"
    staged.mkdir()
    for name in ("topics.tsv", "qrels.txt", "run.txt"):
        shutil.copyfile(tmp_path / name, staged / name)
    monkeypatch.setattr("common.data.source.TableBuilder", None)  # opened, not built again
    again = FileSource(staged / "topics.tsv", staged / "qrels.txt", staged / "run.txt").training_table()
    assert again.folder == table.folder
    assert again.doc_ids(again.candidates(1)) == ["d2", "d3"] and again.labels(1, again.candidates(1)).tolist() == [0, 2]


@pytest.mark.parametrize("part", ["qrels", "candidates"])
def test_a_pair_a_file_repeats_is_refused_naming_its_line(part, tmp_path, monkeypatch):
    """The line the dict readers name: the pair's second occurrence (here line 4, below a comment)."""
    monkeypatch.setenv("EFFICIENT_RANKERS_CACHE", str(tmp_path / "cache"))
    (tmp_path / "topics.tsv").write_text("q1\tone\nq2\ttwo\n")
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\nq2 0 d1 1\n")
    (tmp_path / "run.txt").write_text("q1 Q0 d1 1 2.0 r\nq1 Q0 d2 2 1.0 r\n")
    repeated = tmp_path / ("qrels.txt" if part == "qrels" else "run.txt")
    first = repeated.read_text().splitlines()[0]
    repeated.write_text(repeated.read_text() + "# a comment\n" + first + "\n")
    source = FileSource(tmp_path / "topics.tsv", tmp_path / "qrels.txt", tmp_path / "run.txt")
    with pytest.raises(DataFormatError) as by_dicts:
        (read_qrels if part == "qrels" else read_run)(repeated)
    with pytest.raises(DataFormatError) as streamed:
        source.training_table()
    assert (streamed.value.path, streamed.value.line) == (str(repeated.resolve()), by_dicts.value.line) == (
        str(repeated.resolve()), 4)
    assert "'d1'" in streamed.value.reason and "'q1'" in streamed.value.reason
    assert not (tmp_path / "cache" / "training").exists() or not any(
        p.is_dir() for p in (tmp_path / "cache" / "training").iterdir())  # nothing half-written


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
