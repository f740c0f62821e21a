"""The ORCAS clicked-queries document field (conformer_kernel.orcas)."""

import multiprocessing
import os
import pickle
from typing import NamedTuple

import pytest

from common.data import irds
from common.data.formats import DataFormatError
from conformer_kernel.orcas import OrcasField, orcas_from_spec

TOPICS = "q1\tcheap flights\nq2\tflight deals\nq3\tweather today\nq4\tunused query\n"
# ORCAS qrels layout: qid 0 docid 1. q2->D1 is clicked twice; grade-0 lines are not clicks.
QRELS = "q2 0 D1 1\nq1 0 D1 1\nq3 0 D2 1\nq2 0 D1 1\nq1 0 D3 1\n# a comment\nq3 0 D1 1\nq4 0 D2 0\nq3 0 D4 0\n"
EXPECTED = {
    "D1": "flight deals cheap flights weather today",
    "D2": "weather today",
    "D3": "cheap flights",
}


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    """Every test gets its own project cache ($EFFICIENT_RANKERS_CACHE)."""
    root = tmp_path / "cache"
    monkeypatch.setenv("EFFICIENT_RANKERS_CACHE", str(root))
    return root / "orcas"


@pytest.fixture
def files(tmp_path):
    topics, qrels = tmp_path / "orcas-queries.tsv", tmp_path / "orcas-qrels.tsv"
    topics.write_text(TOPICS)
    qrels.write_text(QRELS)
    return topics, qrels


def _cache_files(folder):
    """The files in `folder` but the lock files its builds leave (`common.io.build_lock`)."""
    return sorted(p.name for p in folder.iterdir() if p.suffix != ".lock") if folder.exists() else []


def test_texts_follow_click_order_once_per_query(files, cache):
    field = OrcasField.from_files(*files, progress=False)
    assert field.path.parent == cache
    assert {doc_id: field.get(doc_id) for doc_id in ("D1", "D2", "D3")} == EXPECTED
    # Nobody clicked D4 (grade 0) or D9 (absent): the field is empty, and they are not stored.
    assert field.get("D4") == "" and field.get("D9") == ""
    assert field.get("D4", None) is None and field.get("D9", None) is None and field.get("D3", None) == "cheap flights"
    assert len(field) == 3
    assert field.source.startswith("files: topics=") and str(files[1].resolve()) in field.source


def test_second_construction_reuses_the_cache_and_a_changed_input_rebuilds(files, cache):
    topics, qrels = files
    first = OrcasField.from_files(topics, qrels, progress=False)
    before = os.stat(first.path)
    second = OrcasField.from_files(topics, qrels, progress=False)
    after = os.stat(second.path)
    assert second.path == first.path
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert _cache_files(cache) == [first.path.name]  # no staging or temporary file left behind

    qrels.write_text(QRELS + "q4 0 D2 1\n")
    third = OrcasField.from_files(topics, qrels, progress=False)
    assert third.path != first.path
    assert third.get("D2") == "weather today unused query" and len(third) == 3
    assert first.get("D2") == "weather today"  # the old file is untouched
    assert len(_cache_files(cache)) == 2


def test_explicit_cache_dir(files, tmp_path, cache):
    field = OrcasField.from_files(*files, cache_dir=tmp_path / "elsewhere", progress=False)
    assert field.path.parent == tmp_path / "elsewhere" and field.get("D3") == "cheap flights"
    assert _cache_files(cache) == []


#: (the file rewritten, its text, the one line naming the file and the line).
MALFORMED = [
    ("qrels", "q1 0 D1 1\nq2 0 D1\n", r"orcas-qrels.tsv:2: expected 4 fields 'qid iter docid rel', got 3"),
    ("qrels", "q1 0 D1 1\n\nq2 0 D1 yes\n", r"orcas-qrels.tsv:3: relevance 'yes' is not an integer"),
    ("qrels", "q1 0 D1 1\nq2 0 D2 1\nq9 0 D1 1\nq8 0 D1 1\n",
     r"orcas-qrels.tsv:3: query id 'q9' is not in the topics file"),
    ("topics", "q1\tcheap flights\nq1\tagain\n", r"orcas-queries.tsv:2: duplicate topic id 'q1'"),
    ("topics", "q1\tcheap flights\nq2 no tab\n", r"orcas-queries.tsv:2: expected 'qid<TAB>text'"),
]


@pytest.mark.parametrize("which, text, message", MALFORMED)
def test_a_malformed_input_names_file_and_line_and_leaves_no_cache(files, cache, which, text, message):
    topics, qrels = files
    (qrels if which == "qrels" else topics).write_text(text)
    with pytest.raises(DataFormatError, match=message):
        OrcasField.from_files(topics, qrels, progress=False)
    assert _cache_files(cache) == []


def test_missing_input_file(files, tmp_path):
    with pytest.raises(FileNotFoundError, match="absent.tsv"):
        OrcasField.from_files(files[0], tmp_path / "absent.tsv", progress=False)
    with pytest.raises(FileNotFoundError, match="no such ORCAS field file"):
        OrcasField(tmp_path / "absent.sqlite")


def _lookup_in_child(field, queue):
    queue.put((field.get("D1"), len(field)))


def test_pickle_round_trip_and_fork(files):
    field = OrcasField.from_files(*files, progress=False)
    assert field.get("D2") == "weather today"  # opens a connection in the parent first
    copy = pickle.loads(pickle.dumps(field))
    assert copy.path == field.path
    assert copy.get("D1") == EXPECTED["D1"] and copy.get("D4") == "" and len(copy) == 3
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_lookup_in_child, args=(field, queue))
    child.start()
    child.join(30)
    assert queue.get(timeout=5) == (EXPECTED["D1"], 3)


# --- ir_datasets ------------------------------------------------------------------


class Query(NamedTuple):  # ir_datasets' GenericQuery layout (no default_text(): the text field is used)
    query_id: str
    text: str


class Qrel(NamedTuple):  # ir_datasets' TrecQrel layout
    query_id: str
    doc_id: str
    relevance: int
    iteration: str


class FakeOrcas:
    def __init__(self, queries, qrels, qrels_error=None):
        self.queries, self.qrels, self.qrels_error = queries, qrels, qrels_error

    def has_queries(self):
        return True

    def has_qrels(self):
        return True

    def queries_iter(self):
        return iter(self.queries)

    def qrels_iter(self):
        if self.qrels_error is not None:
            raise self.qrels_error
        return iter(self.qrels)


QUERIES = [Query("10", " cheap flights "), Query("11", "flight deals"), Query("12", "weather today")]
CLICKS = [
    Qrel("11", "D1", 1, "0"),
    Qrel("10", "D1", 1, "0"),
    Qrel("12", "D2", 1, "0"),
    Qrel("11", "D1", 1, "0"),
    Qrel("10", "D3", 1, "0"),
    Qrel("12", "D1", 1, "0"),
    Qrel("12", "D4", 0, "0"),
]


@pytest.fixture
def loads(monkeypatch):
    """Replace irds.load_dataset by a registry of fakes; records the ids asked for."""
    registry, asked = {}, []

    def load_dataset(dataset_id):
        asked.append(dataset_id)
        return registry[dataset_id]

    monkeypatch.setattr(irds, "load_dataset", load_dataset)
    return registry, asked


def test_from_irds_builds_the_same_field_and_reuses_the_cache(loads, cache):
    registry, asked = loads
    registry["msmarco-document/orcas"] = FakeOrcas(QUERIES, CLICKS)
    field = OrcasField.from_irds(progress=False)
    assert asked == ["msmarco-document/orcas"]
    assert field.path.parent == cache and field.path.name.startswith("irds-msmarco-document_orcas-")
    assert {d: field.get(d) for d in ("D1", "D2", "D3", "D4")} == {**EXPECTED, "D4": ""}
    assert len(field) == 3 and field.source == "irds:msmarco-document/orcas"
    built = os.stat(field.path)

    again = OrcasField.from_irds("msmarco-document/orcas", progress=False)
    assert asked == ["msmarco-document/orcas"]  # the cached field never touches ir_datasets
    assert again.path == field.path and os.stat(again.path).st_mtime_ns == built.st_mtime_ns


def test_from_irds_unknown_query_and_missing_files(loads, cache):
    registry, _ = loads
    registry["orcas/bad"] = FakeOrcas(QUERIES, CLICKS[:2] + [Qrel("99", "D1", 1, "0")])
    with pytest.raises(DataFormatError, match=r"ir_datasets:orcas/bad qrels: query id '99' is not among the queries "
                                              r"\(record 3\)"):
        OrcasField.from_irds("orcas/bad", progress=False)

    registry["orcas/dup"] = FakeOrcas(QUERIES + [Query("10", "again")], CLICKS)
    with pytest.raises(DataFormatError, match=r"ir_datasets:orcas/dup queries: duplicate query id '10' \(record 4\)"):
        OrcasField.from_irds("orcas/dup", progress=False)

    registry["orcas/offline"] = FakeOrcas(QUERIES, CLICKS, qrels_error=FileNotFoundError("orcas-doctrain-qrels.tsv.gz"))
    with pytest.raises(irds.DatasetUnavailableError, match=r"'orcas/offline': could not get the files for its qrels"):
        OrcasField.from_irds("orcas/offline", progress=False)
    assert _cache_files(cache) == []


def test_from_irds_dataset_without_qrels(loads):
    registry, _ = loads

    class NoQrels(FakeOrcas):
        def has_qrels(self):
            return False

    registry["orcas/noqrels"] = NoQrels(QUERIES, [])
    with pytest.raises(ValueError, match="'orcas/noqrels' has no qrels"):
        OrcasField.from_irds("orcas/noqrels", progress=False)


# --- config specs -----------------------------------------------------------------


def test_spec_forms(files, loads, cache):
    registry, asked = loads
    registry["msmarco-document/orcas"] = FakeOrcas(QUERIES, CLICKS)
    assert orcas_from_spec(None) is None

    from_irds = orcas_from_spec("irds:msmarco-document/orcas")
    assert isinstance(from_irds, OrcasField) and asked == ["msmarco-document/orcas"]
    assert from_irds.get("D1") == EXPECTED["D1"]

    topics, qrels = files
    from_files = orcas_from_spec({"topics_path": str(topics), "qrels_path": str(qrels)})
    assert isinstance(from_files, OrcasField) and from_files.path.parent == cache
    assert from_files.get("D1") == EXPECTED["D1"] and from_files.path != from_irds.path


@pytest.mark.parametrize(
    "spec",
    ["msmarco-document/orcas", "irds:", "builtin:test", "", 42, ["irds:x"], {"topics_path": "t.tsv"},
     {"topics_path": "t.tsv", "qrels_path": "q.tsv", "collection_path": "c.tsv"}],
)
def test_malformed_specs_say_what_is_accepted(spec):
    with pytest.raises(ValueError, match=r"irds:<ir_datasets id>|exactly topics_path and qrels_path"):
        orcas_from_spec(spec)
