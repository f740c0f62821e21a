"""SQLite document store and file-based ranking sources (common.data.docstore, common.data.source)."""

import contextlib
import multiprocessing
import os
import pickle
import shutil
import sqlite3

import pytest

from common.data.docstore import SCHEMA_VERSION, DocumentStore, StaleStoreError, schema_version
from common.data.formats import DataFormatError, Document, write_collection, write_qrels, write_run, write_topics
from common.data.source import FileSource, RankingSource

# Every third document has a url (MS MARCO layout), the others none: both must come back as written.
DOCS = [
    Document(f"d{i}", f"text of document {i}", f"title {i}" if i % 2 else "", "" if i % 3 else f"http://x.example/{i}")
    for i in range(50)
]


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """The collections' digests (`common.io.file_digest`) are remembered in this test's own cache."""
    monkeypatch.setenv("EFFICIENT_RANKERS_CACHE", str(tmp_path / "project-cache"))


@pytest.fixture
def collection(tmp_path):
    path = tmp_path / "docs.jsonl"
    write_collection(path, DOCS)
    return path


def test_lookup_by_id_in_order_asked(collection, tmp_path):
    store = DocumentStore.build(collection, tmp_path / "store.sqlite", progress=False)
    assert len(store) == 50
    assert store["d7"] == DOCS[7]
    assert store.get_many(["d42", "d0", "d42"]) == [DOCS[42], DOCS[0], DOCS[42]]
    assert "d49" in store and "d50" not in store
    assert store.get("absent") is None
    with pytest.raises(KeyError, match="document 'absent' is not in"):
        store["absent"]
    assert list(store)[:3] == ["d0", "d1", "d2"]
    assert list(store.documents()) == DOCS


def test_url_round_trip(collection, tmp_path):
    store = DocumentStore.build(collection, tmp_path / "store.sqlite", progress=False)
    assert store["d3"] == Document("d3", "text of document 3", "title 3", "http://x.example/3")
    assert store["d4"].url == ""
    assert [d.url for d in store.get_many(["d6", "d7"])] == ["http://x.example/6", ""]
    assert [d.url for d in store.documents()][:4] == ["http://x.example/0", "", "", "http://x.example/3"]
    assert schema_version(store.path) == SCHEMA_VERSION == 1


def test_tsv_url_column_reaches_the_store(tmp_path):
    path = tmp_path / "msmarco.tsv"
    path.write_text("D1\thttp://a.example/1\tTitle\tBody one\nD2\tTitle two\tBody two\n", encoding="utf-8")
    store = DocumentStore.build(path, tmp_path / "s.sqlite", progress=False)
    assert store.get_many(["D1", "D2"]) == [
        Document("D1", "Body one", "Title", "http://a.example/1"),
        Document("D2", "Body two", "Title two", ""),
    ]


def _write_old_schema_store(path):
    """A store as built before documents had urls: no url column, user_version 0, stale text."""
    path.unlink()
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE docs (doc_id TEXT PRIMARY KEY, title TEXT NOT NULL, text TEXT NOT NULL)")
        db.execute("INSERT INTO docs VALUES ('d0', '', 'stale text')")
        db.commit()


def test_old_schema_cache_is_rebuilt_not_read_without_urls(collection, tmp_path):
    cache = tmp_path / "cache"
    path = DocumentStore.for_collection(collection, cache, progress=False).path
    _write_old_schema_store(path)
    assert schema_version(path) == 0
    # Opened directly, an old store says what is wrong instead of failing on a missing column.
    with pytest.raises(StaleStoreError, match="schema version 0, this code reads version 1"):
        DocumentStore(path)["d0"]
    # Through the cache it is rebuilt in place from the collection, urls included.
    rebuilt = DocumentStore.for_collection(collection, cache, progress=False)
    assert rebuilt.path == path and schema_version(path) == SCHEMA_VERSION
    assert len(rebuilt) == 50 and rebuilt["d0"] == Document("d0", "text of document 0", "", "http://x.example/0")
    assert sorted(p.name for p in cache.iterdir()) == [path.name, f"{path.name}.lock"]  # replaced, no temporary file


def test_store_is_built_once_and_reused(collection, tmp_path):
    cache = tmp_path / "cache"
    first = DocumentStore.for_collection(collection, cache, progress=False)
    built_at = os.stat(first.path).st_mtime_ns
    second = DocumentStore.for_collection(collection, cache, progress=False)
    assert second.path == first.path and os.stat(second.path).st_mtime_ns == built_at
    assert sorted(p.name for p in cache.iterdir()) == [first.path.name, f"{first.path.name}.lock"]

    # A changed collection gets a fresh store instead of stale text.
    write_collection(collection, DOCS[:3] + [Document("new", "new text")], overwrite=True)
    third = DocumentStore.for_collection(collection, cache, progress=False)
    assert third.path != first.path and len(third) == 4 and third["new"].text == "new text"


def test_a_copy_of_the_collection_elsewhere_finds_its_store(collection, tmp_path, monkeypatch):
    """Keyed by content: a collection staged per job (a new path, a new time) is not indexed again."""
    cache = tmp_path / "cache"
    first = DocumentStore.for_collection(collection, cache, progress=False)
    staged = tmp_path / "node-local" / "job-2" / "docs.jsonl"
    staged.parent.mkdir(parents=True)
    shutil.copyfile(collection, staged)
    monkeypatch.setattr(DocumentStore, "build", classmethod(lambda *args, **kwargs: pytest.fail("built again")))
    again = DocumentStore.for_collection(staged, cache, progress=False)
    assert again.path == first.path and again["d5"] == DOCS[5]


def test_get_many_fetches_a_batch_with_one_statement(collection, tmp_path):
    store = DocumentStore.build(collection, tmp_path / "s.sqlite", progress=False)
    asked = ["d42", "d0", "d42", "d7", *(f"d{i}" for i in range(10, 40))]  # 33 distinct ids, one repeated
    statements = []
    store._db.set_trace_callback(statements.append)
    assert store.get_many(asked) == [DOCS[int(doc_id[1:])] for doc_id in asked]
    assert len(statements) == 1
    if hasattr(sqlite3.Connection, "setlimit"):  # Python >= 3.11: a lower limit splits the batch
        store._db.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 8)
        statements.clear()
        assert store.variable_limit() == 8
        assert store.get_many(asked) == [DOCS[int(doc_id[1:])] for doc_id in asked]
        assert len(statements) == 5  # ceil(33 / 8)
    with pytest.raises(KeyError, match=r"2 document\(s\) not in .*s.sqlite: 'x1', 'x2'"):
        store.get_many(["d1", "x1", "d2", "x2", "x1"])
    assert store.get_many([]) == []


def test_a_store_is_read_without_taking_a_lock(collection, tmp_path):
    """Opened immutable: a reader takes no lock (on NFS, a round trip per statement), so a writer's exclusive lock,
    which stops any reader that locks, does not stop it."""
    store = DocumentStore.build(collection, tmp_path / "s.sqlite", progress=False)
    with contextlib.closing(sqlite3.connect(store.path, timeout=0)) as writer:
        writer.execute("BEGIN EXCLUSIVE")
        locking = sqlite3.connect(f"{store.path.as_uri()}?mode=ro", uri=True, timeout=0)
        with contextlib.closing(locking), pytest.raises(sqlite3.OperationalError, match="locked"):
            locking.execute("SELECT COUNT(*) FROM docs").fetchone()
        assert schema_version(store.path) == SCHEMA_VERSION
        assert store.get_many(["d3", "d1"]) == [DOCS[3], DOCS[1]] and store["d4"] == DOCS[4] and len(store) == 50
        writer.rollback()


def test_duplicate_document_id_is_named_and_nothing_written(tmp_path):
    path = tmp_path / "docs.tsv"
    path.write_text("a\tone\nb\ttwo\na\tthree\n")
    with pytest.raises(DataFormatError, match=r"docs.tsv:3: duplicate document id 'a'"):
        DocumentStore.build(path, tmp_path / "out" / "store.sqlite", progress=False)
    assert list((tmp_path / "out").iterdir()) == []


def test_build_refuses_to_overwrite(collection, tmp_path):
    DocumentStore.build(collection, tmp_path / "s.sqlite", progress=False)
    with pytest.raises(FileExistsError):
        DocumentStore.build(collection, tmp_path / "s.sqlite", progress=False)


def _lookup_in_child(store, queue):
    queue.put(store["d3"].text)


def test_store_survives_pickle_and_fork(collection, tmp_path):
    store = DocumentStore.build(collection, tmp_path / "s.sqlite", progress=False)
    assert store["d1"] == DOCS[1]  # opens a connection in the parent first
    assert pickle.loads(pickle.dumps(store))["d2"] == DOCS[2]
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_lookup_in_child, args=(store, queue))
    child.start()
    child.join(30)
    assert queue.get(timeout=5) == "text of document 3"


def test_file_source(tmp_path, collection):
    write_topics(tmp_path / "topics.tsv", {"1": "document seven"})
    write_qrels(tmp_path / "qrels.txt", {"1": {"d7": 2}})
    write_run(tmp_path / "run.trec", {"1": {"d7": 3.0, "d8": 1.0}})
    source = FileSource(tmp_path / "topics.tsv", tmp_path / "qrels.txt", tmp_path / "run.trec", collection,
                        cache_dir=tmp_path / "cache")
    assert isinstance(source, RankingSource) and source.name == "topics"
    assert source.topics() == {"1": "document seven"}
    assert source.qrels() == {"1": {"d7": 2}}
    assert source.candidates() == {"1": {"d7": 3.0, "d8": 1.0}}
    assert source.documents()["d8"] == DOCS[8]


def test_file_source_without_qrels_judges_nothing(tmp_path):
    """No qrels file: empty qrels (a task re-ranked, not measured); training, which needs them, still says so."""
    write_topics(tmp_path / "topics.tsv", {"1": "q"})
    source = FileSource(tmp_path / "topics.tsv", name="test")
    assert source.qrels() == {}
    with pytest.raises(ValueError, match="source 'test' has no qrels file"):
        source.training_table()


def test_real_trec_dl_files(shared_data, tmp_path):
    """Counts from shared/data/SOURCES.md: DL19 passage 43 q / 9,260 judgments; DL20 doc 45 q / 9,098."""
    dl = shared_data / "trec_dl"
    source = FileSource(dl / "topics" / "topics.dl19-passage.txt", dl / "qrels" / "qrels.dl19-passage.txt",
                        dl / "runs" / "rank_llm_data_top100" / "BM25.trec_results_dl19_top100.txt")
    qrels = source.qrels()
    assert len(qrels) == 43 and sum(map(len, qrels.values())) == 9260
    assert set(source.topics()) == set(qrels)
    assert len(source.candidates()) == 43 and all(len(hits) == 100 for hits in source.candidates().values())
    doc_qrels = FileSource(dl / "topics" / "topics.dl19-doc.txt", dl / "qrels" / "qrels.dl20-doc.txt").qrels()
    assert len(doc_qrels) == 45 and sum(map(len, doc_qrels.values())) == 9098


def test_real_collection_store(shared_data, tmp_path):
    """Cranfield: 1,400 documents; 471 and 995 have empty text in the original."""
    store = DocumentStore.for_collection(shared_data / "cranfield" / "derived" / "docs.jsonl", tmp_path, progress=False)
    assert len(store) == 1400
    assert store["471"].text == "" and store["995"].text == ""
    assert store["1"].title.startswith("experimental investigation of the aerodynamics of a wing")
