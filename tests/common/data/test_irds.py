"""ir_datasets adapter (common.data.irds), tested through ir_datasets' own classes on local files.

ir_datasets cannot download here, so each test registers a small dataset built
from ir_datasets' real format handlers (TsvQueries, TrecQueries, TrecQrels,
TrecScoredDocs, TsvDocs) over files in tmp_path, under a unique id that is
removed from the global registry afterwards. The network is blocked for every
test (DNS and connect raise), so a download attempt fails fast and visibly.
"""

import multiprocessing
import os
import pickle
import time
import warnings
from typing import NamedTuple

import pytest

ir_datasets = pytest.importorskip("ir_datasets")

from ir_datasets.datasets.base import Dataset, ExpectedFile  # noqa: E402
from ir_datasets.formats import TrecQrels, TrecQueries, TrecScoredDocs, TsvDocs, TsvQueries  # noqa: E402
from ir_datasets.util import Download, LocalDownload, RequestsDownload  # noqa: E402

from common.data.formats import DataFormatError, Document  # noqa: E402
from common.data.irds import (  # noqa: E402
    DatasetUnavailableError,
    IrDatasetsDocuments,
    IrDatasetsSource,
    UnknownDatasetError,
    to_document,
)
from common.data.source import DocumentLookup, RankingSource  # noqa: E402


class MarcoDoc(NamedTuple):
    """The msmarco-document layout: url and title beside the body."""

    doc_id: str
    url: str
    title: str
    body: str

    def default_text(self):
        return f"{self.title} {self.body}"


class AbstractDoc(NamedTuple):
    """NFCorpus-like: no body/text field, default_text() prepends the title."""

    doc_id: str
    url: str
    title: str
    abstract: str

    def default_text(self):
        return f"{self.title} {self.abstract}"


QUERIES = "1037798\twho is robert gray\nq2\t  what is a cat  \n"
QRELS = "1037798 0 d1 2\n1037798 0 d2 0\nq2 0 d3 1\nq2 0 d1 -1\n"
RUN = "1037798 Q0 d2 1 14.25 bm25\n1037798 Q0 d1 2 9.5 bm25\nq2 Q0 d3 1 7 bm25\nq2 Q0 d4 2 -1.5 bm25\n"
MARCO_DOCS = (
    "d1\thttp://a.example/1\tRobert Gray\tRobert Gray was an American sea captain.\n"
    "d2\thttp://a.example/2\t\tA page without a title.\n"
    "d3\thttp://a.example/3\tCats\tCats are small felines.\n"
    "d4\thttp://a.example/4\tDogs\tDogs bark.\n"
)
TREC_TOPICS = """<top>
<num> Number: 301
<title> International Organized Crime
<desc> Description:
Identify organizations that participate in international criminal activity.
<narr> Narrative:
A relevant document must name the organization.
</top>

<top>
<num> Number: 302
<title> Poliomyelitis and Post-Polio
<desc> Description:
Is the disease of Poliomyelitis (polio) under control in the world?
<narr> Narrative:
Relevant documents should contain data on polio cases.
</top>
"""

EXPECTED_TOPICS = {"1037798": "who is robert gray", "q2": "what is a cat"}
EXPECTED_QRELS = {"1037798": {"d1": 2, "d2": 0}, "q2": {"d3": 1, "d1": -1}}
EXPECTED_RUN = {"1037798": {"d2": 14.25, "d1": 9.5}, "q2": {"d3": 7.0, "d4": -1.5}}
EXPECTED_DOCS = {
    "d1": Document("d1", "Robert Gray was an American sea captain.", "Robert Gray", "http://a.example/1"),
    "d2": Document("d2", "A page without a title.", "", "http://a.example/2"),
    "d3": Document("d3", "Cats are small felines.", "Cats", "http://a.example/3"),
    "d4": Document("d4", "Dogs bark.", "Dogs", "http://a.example/4"),
}


pytestmark = pytest.mark.usefixtures("network")  # offline; `network`, `register`: conftest.py


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def tiny_dataset(folder, *, docs_cls=MarcoDoc, docs=MARCO_DOCS, qrels=QRELS, run=RUN, write_files=True):
    """Queries, qrels, scoreddocs and docs from local files, through ir_datasets' format classes."""
    paths = {name: folder / name for name in ("queries.tsv", "qrels.txt", "run.txt", "docs.tsv")}
    if write_files:
        for (name, path), text in zip(paths.items(), (QUERIES, qrels, run, docs)):
            if text is not None:
                write(path, text)
    return Dataset(
        TsvQueries(LocalDownload(paths["queries.tsv"])),
        TrecQrels(LocalDownload(paths["qrels.txt"]), {0: "not", 1: "relevant", 2: "highly"}),
        TrecScoredDocs(LocalDownload(paths["run.txt"])) if run is not None else None,
        TsvDocs(LocalDownload(paths["docs.tsv"]), doc_cls=docs_cls),
    )


# --- topics, qrels, candidates ------------------------------------------------------


def test_topics_qrels_candidates_are_exactly_the_files(tmp_path, register, network):
    dataset_id = register(tiny_dataset(tmp_path))
    source = IrDatasetsSource(dataset_id)
    assert isinstance(source, RankingSource)
    assert source.name == dataset_id
    assert source.provides() == {"topics", "qrels", "candidates", "documents"}
    assert source.topics() == EXPECTED_TOPICS  # qids are str, text stripped
    assert source.qrels() == EXPECTED_QRELS  # negative grade kept
    assert all(type(rel) is int for judged in source.qrels().values() for rel in judged.values())
    assert source.candidates() == EXPECTED_RUN
    assert all(type(s) is float for scores in source.candidates().values() for s in scores.values())
    assert network == []


def test_trec_topics_use_default_text_or_the_chosen_field(tmp_path, register):
    topics = write(tmp_path / "topics.txt", TREC_TOPICS)
    dataset_id = register(Dataset(TrecQueries(LocalDownload(topics))))
    assert IrDatasetsSource(dataset_id).topics() == {
        "301": "International Organized Crime",  # TrecQuery.default_text() is the title
        "302": "Poliomyelitis and Post-Polio",
    }
    assert IrDatasetsSource(dataset_id, query_field="description").topics() == {
        "301": "Identify organizations that participate in international criminal activity.",
        "302": "Is the disease of Poliomyelitis (polio) under control in the world?",
    }
    with pytest.raises(ValueError, match=r"query_field='desc' is not a field .* title, description, narrative"):
        IrDatasetsSource(dataset_id, query_field="desc")


def test_duplicate_judgment_is_an_error_naming_the_dataset(tmp_path, register):
    dataset_id = register(tiny_dataset(tmp_path, qrels=QRELS + "q2 0 d3 0\n"))
    with pytest.raises(DataFormatError, match=rf"ir_datasets:{dataset_id} qrels: duplicate judgment for query "
                                              r"'q2', document 'd3' \(record 5\)"):
        IrDatasetsSource(dataset_id).qrels()


def test_duplicate_candidate_is_an_error(tmp_path, register):
    dataset_id = register(tiny_dataset(tmp_path, run=RUN + "q2 Q0 d3 3 1.0 bm25\n"))
    with pytest.raises(DataFormatError, match=r"scoreddocs: document 'd3' retrieved twice for query 'q2'"):
        IrDatasetsSource(dataset_id).candidates()


def test_no_scoreddocs_points_at_bm25(tmp_path, register):
    source = IrDatasetsSource(register(tiny_dataset(tmp_path, run=None)))
    assert source.provides() == {"topics", "qrels", "documents"}
    with pytest.raises(ValueError, match=r"has no scoreddocs .*common\.data\.bm25"):
        source.candidates()
    assert source.topics() == EXPECTED_TOPICS  # the rest still works


def test_scoreddocs_without_scores_warn(tmp_path, register):
    # MS MARCO passage's top-1000 files reach ir_datasets as "qid did" pairs: every score is 0.
    dataset_id = register(tiny_dataset(tmp_path, run="q2 d3\nq2 d4\n1037798 d1\n"))
    with pytest.warns(UserWarning, match="all score 0.0: the candidates have no first-stage order"):
        run = IrDatasetsSource(dataset_id).candidates()
    assert run == {"q2": {"d3": 0.0, "d4": 0.0}, "1037798": {"d1": 0.0}}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        IrDatasetsSource(register(tiny_dataset(tmp_path))).candidates()  # real scores: no warning


# --- documents -----------------------------------------------------------------------


def test_title_and_body_documents_keep_the_url_apart(tmp_path, register):
    docs = IrDatasetsSource(register(tiny_dataset(tmp_path))).documents()
    assert isinstance(docs, DocumentLookup)
    assert docs["d1"] == EXPECTED_DOCS["d1"]
    assert docs["d2"] == EXPECTED_DOCS["d2"]  # an empty title stays empty
    assert docs.get_many(["d4", "d1", "d4", "d2"]) == [EXPECTED_DOCS[d] for d in ("d4", "d1", "d4", "d2")]
    assert docs.get_many([]) == []
    assert "d3" in docs and "d9" not in docs and 3 not in docs
    assert docs.get("d9") is None and docs.get("d3") == EXPECTED_DOCS["d3"]
    with pytest.raises(KeyError, match=r"document 'd9' is not in ir_datasets dataset"):
        docs["d9"]
    with pytest.raises(KeyError, match=r"2 document\(s\) not in ir_datasets dataset .*'d9', 'd10'"):
        docs.get_many(["d1", "d9", "d10", "d9"])
    # ir_datasets' fixed-width key index truncates a longer id to a stored one ("d10" -> "d1"):
    # the adapter checks the ids asked, so it is still missing.
    with pytest.raises(KeyError):
        docs["d10"]
    assert list(docs.documents()) == list(EXPECTED_DOCS.values())
    assert list(docs) == list(EXPECTED_DOCS)  # ids in collection order, like a DocumentStore


def test_text_only_documents(tmp_path, register):
    # msmarco-passage layout: GenericDoc(doc_id, text), ir_datasets' default document class.
    passages = write(tmp_path / "collection.tsv", "0\tThe presence of communication.\n7\tManhattan Project.\n")
    docs = IrDatasetsSource(register(Dataset(TsvDocs(LocalDownload(passages))))).documents()
    assert docs.get_many(["7", "0"]) == [
        Document("7", "Manhattan Project."),
        Document("0", "The presence of communication."),
    ]


def test_documents_without_a_body_field_use_default_text_without_the_title(tmp_path, register):
    folder = tmp_path
    rows = "n1\thttp://x.example/n1\tStatins\tStatins lower cholesterol.\nn2\thttp://x.example/n2\t\tNo title here.\n"
    dataset_id = register(tiny_dataset(folder, docs_cls=AbstractDoc, docs=rows))
    docs = IrDatasetsSource(dataset_id).documents()
    assert docs.get_many(["n1", "n2"]) == [
        # default_text() with title and url blanked: not "Statins Statins lower ..." nor the url.
        Document("n1", "Statins lower cholesterol.", "Statins", "http://x.example/n1"),
        Document("n2", "No title here.", "", "http://x.example/n2"),
    ]
    # doc_text_field picks the field outright.
    assert IrDatasetsSource(dataset_id, doc_text_field="url").documents()["n1"] == Document(
        "n1", "http://x.example/n1", "Statins", "http://x.example/n1"
    )
    with pytest.raises(ValueError, match=r"doc_text_field='body' is not a field .* doc_id, url, title, abstract"):
        IrDatasetsSource(dataset_id, doc_text_field="body")


def test_to_document_field_choice():
    class TrecParsed(NamedTuple):  # ir_datasets' TrecParsedDoc: bytes mark-up beside title/body
        doc_id: str
        title: str
        body: str
        marked_up_doc: bytes

    class Code(NamedTuple):  # no default_text(), no body: remaining string fields joined
        doc_id: str
        func_name: str
        code: str

    assert to_document(TrecParsed("FT1", "Head", "Body text.", b"<DOC>")) == Document("FT1", "Body text.", "Head")
    assert to_document(Code("c1", "add", "return a + b")) == Document("c1", "add return a + b")


def test_to_document_takes_the_url_and_keeps_it_out_of_the_text():
    marco = MarcoDoc("D1555982", "https://answers.yahoo.com/question/index?qid=1", "The hot glowing surfaces",
                     "The hot glowing surfaces of stars emit energy.")
    assert to_document(marco) == Document("D1555982", "The hot glowing surfaces of stars emit energy.",
                                          "The hot glowing surfaces", "https://answers.yahoo.com/question/index?qid=1")

    class Linked(NamedTuple):  # no body, no default_text(): the joined fields must not contain the url
        doc_id: str
        url: str
        title: str
        summary: str
        notes: str

    class BytesUrl(NamedTuple):  # a non-string url is not a url
        doc_id: str
        url: bytes
        text: str

    assert to_document(Linked("L1", "http://l.example/1", "Head", "Short summary.", "More.")) == Document(
        "L1", "Short summary. More.", "Head", "http://l.example/1"
    )
    assert to_document(BytesUrl("B1", b"http://b.example/", "Plain text.")) == Document("B1", "Plain text.", "", "")


# --- laziness, caching, pickling -----------------------------------------------------


def test_nothing_is_read_until_asked_and_parts_are_cached(tmp_path, register):
    # The files do not exist yet: constructing the source must not touch them.
    dataset_id = register(tiny_dataset(tmp_path, write_files=False))
    source = IrDatasetsSource(dataset_id)
    for name, text in (("queries.tsv", QUERIES), ("qrels.txt", QRELS), ("run.txt", RUN), ("docs.tsv", MARCO_DOCS)):
        write(tmp_path / name, text)
    topics, qrels, run, docs = source.topics(), source.qrels(), source.candidates(), source.documents()
    assert docs["d3"] == EXPECTED_DOCS["d3"]  # builds ir_datasets' docstore beside the file
    for name in ("queries.tsv", "qrels.txt", "run.txt", "docs.tsv"):
        (tmp_path / name).unlink()
    assert source.topics() is topics and source.qrels() is qrels and source.candidates() is run
    assert source.documents() is docs and docs["d1"] == EXPECTED_DOCS["d1"]


def test_source_and_lookup_pickle(tmp_path, register):
    source = IrDatasetsSource(register(tiny_dataset(tmp_path)))
    docs = source.documents()
    assert docs["d1"] == EXPECTED_DOCS["d1"]  # opened before pickling
    copy = pickle.loads(pickle.dumps(docs))
    assert isinstance(copy, IrDatasetsDocuments) and copy.get_many(["d3", "d1"]) == [EXPECTED_DOCS["d3"],
                                                                                       EXPECTED_DOCS["d1"]]
    source.topics()
    source_copy = pickle.loads(pickle.dumps(source))
    assert source_copy.topics() == EXPECTED_TOPICS and source_copy.qrels() == EXPECTED_QRELS


def _lookup_in_child(docs, queue):
    queue.put((docs.get_many(["d3", "d2"]), docs._pid == os.getpid()))


def test_lookup_reopens_its_store_after_a_fork(tmp_path, register):
    docs = IrDatasetsSource(register(tiny_dataset(tmp_path))).documents()
    assert docs["d1"] == EXPECTED_DOCS["d1"]  # the parent opens the store (and its file handles) first
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_lookup_in_child, args=(docs, queue))
    child.start()
    child.join(30)
    assert queue.get(timeout=5) == ([EXPECTED_DOCS["d3"], EXPECTED_DOCS["d2"]], True)
    assert docs["d4"] == EXPECTED_DOCS["d4"]


def _prepare_at_once(dataset_id, barrier):
    barrier.wait()
    IrDatasetsSource(dataset_id).documents().prepare()


def test_processes_opening_a_new_store_at_once_build_it_once(tmp_path, register, monkeypatch):
    # ir_datasets checks whether its store is built before taking its own lock: each process would append every
    # document. Every transaction (a build) is logged, in the parent and in the forked children alike.
    from ir_datasets.indices.lz4_pickle import Lz4PickleLookup

    log = tmp_path / "builds.log"
    transaction = Lz4PickleLookup.transaction

    def logged(self):
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        return transaction(self)

    monkeypatch.setattr(Lz4PickleLookup, "transaction", logged)
    dataset_id = register(tiny_dataset(tmp_path))
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(3)
    children = [context.Process(target=_prepare_at_once, args=(dataset_id, barrier)) for _ in range(3)]
    for child in children:
        child.start()
    for child in children:
        child.join(60)
        assert child.exitcode == 0
    assert len(log.read_text().split()) == 1
    assert ir_datasets.load(dataset_id).docs_store().count() == len(EXPECTED_DOCS)
    assert IrDatasetsSource(dataset_id).documents().get_many(["d4", "d1"]) == [EXPECTED_DOCS["d4"], EXPECTED_DOCS["d1"]]


def _prepare_as_a_node(dataset_id, barrier, cache):
    os.environ["EFFICIENT_RANKERS_CACHE"] = str(cache)  # each node its own project cache
    barrier.wait()
    IrDatasetsSource(dataset_id).documents().prepare()


def test_nodes_with_their_own_caches_sharing_a_store_build_it_once(tmp_path, register, monkeypatch):
    """Three nodes, each with its own EFFICIENT_RANKERS_CACHE, one store (under a shared IR_DATASETS_HOME, or beside
    a shared collection as here): its lock lies beside it, not in each node's cache. Each build is slowed down, so
    that a node not held back by the lock would start its own while the first one builds."""
    from contextlib import contextmanager

    from ir_datasets.indices.lz4_pickle import Lz4PickleLookup

    log = tmp_path / "builds.log"
    transaction = Lz4PickleLookup.transaction

    @contextmanager
    def slow(self):
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(1)
        with transaction(self) as trans:
            yield trans

    monkeypatch.setattr(Lz4PickleLookup, "transaction", slow)
    dataset_id = register(tiny_dataset(tmp_path))
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(3)
    nodes = [context.Process(target=_prepare_as_a_node, args=(dataset_id, barrier, tmp_path / f"node{n}"))
             for n in range(3)]
    for node in nodes:
        node.start()
    for node in nodes:
        node.join(60)
        assert node.exitcode == 0
    assert len(log.read_text().split()) == 1
    assert ir_datasets.load(dataset_id).docs_store().count() == len(EXPECTED_DOCS)
    assert (tmp_path / "docs.tsv.pklz4.lock").is_file()  # beside the store
    assert not any((tmp_path / f"node{n}").exists() for n in range(3))  # nothing in the nodes' own caches


# --- errors --------------------------------------------------------------------------


def test_unknown_id_lists_close_matches(register, tmp_path):
    with pytest.raises(UnknownDatasetError, match=r"unknown ir_datasets id 'robust04'; did you mean .*trec-robust04"):
        IrDatasetsSource("robust04")
    with pytest.raises(UnknownDatasetError) as caught:
        IrDatasetsSource("msmarco-document/trec-dl-2019/judgd")
    assert caught.value.matches[0] == "msmarco-document/trec-dl-2019/judged"
    dataset_id = register(tiny_dataset(tmp_path))
    with pytest.raises(UnknownDatasetError) as caught:
        IrDatasetsSource(dataset_id[:-1])
    assert dataset_id in caught.value.matches
    with pytest.raises(UnknownDatasetError, match="no registered id is close to it"):
        IrDatasetsSource("zzzzqqqq")


def test_missing_local_file_is_a_clear_error(tmp_path, register, monkeypatch):
    home = tmp_path / "irds-home"
    monkeypatch.setenv("IR_DATASETS_HOME", str(home))
    dataset_id = register(tiny_dataset(tmp_path, write_files=False))
    source = IrDatasetsSource(dataset_id)
    with pytest.raises(DatasetUnavailableError) as caught:
        source.topics()
    message = str(caught.value)
    assert f"ir_datasets dataset {dataset_id!r}: could not get the files for its queries" in message
    assert f"IR_DATASETS_HOME={home}" in message
    assert str(tmp_path / "queries.tsv") in caught.value.expected
    assert isinstance(caught.value.__cause__, FileNotFoundError)
    with pytest.raises(DatasetUnavailableError, match="could not get the files for its documents") as caught:
        source.documents()["d1"]
    assert str(tmp_path / "docs.tsv") in caught.value.expected


@pytest.mark.parametrize("mirrors", [1, 2])
def test_failed_download_is_a_clear_error_and_touches_no_network(tmp_path, register, monkeypatch, network, mirrors):
    # ir_datasets' real Download/RequestsDownload: one mirror re-raises requests' ConnectionError,
    # several raise RuntimeError('All download sources failed', ...). Both come out the same.
    home = tmp_path / "irds-home"
    monkeypatch.setenv("IR_DATASETS_HOME", str(home))
    urls = ["https://data.example.invalid/tiny/queries.tsv", "https://mirror.example.invalid/0123abcd"][:mirrors]
    target = home / "efficient-rankers-test" / "queries.tsv"
    download = Download([RequestsDownload(url) for url in urls], cache_path=str(target))
    dataset_id = register(Dataset(TsvQueries(download)))
    with pytest.raises(DatasetUnavailableError) as caught:
        IrDatasetsSource(dataset_id).topics()
    error = caught.value
    assert error.dataset_id == dataset_id and error.part == "queries" and error.home == home
    assert error.expected == [f"{target}  (from {' or '.join(urls)})"]
    message = str(error)
    assert f"IR_DATASETS_HOME={home}" in message and str(target) in message
    assert "ConnectionError" in message and "network disabled in tests" in message
    assert "Traceback" not in message
    assert [host for host in network if isinstance(host, str)] == [u.split("/")[2] for u in urls]
    assert not target.exists()  # nothing half-written


def test_manual_download_dataset_is_a_clear_error(tmp_path, register):
    # Licensed collections (TREC disks 4&5 for Robust04) are an ExpectedFile the user must place.
    corpus = tmp_path / "disks45" / "corpus"
    topics = ExpectedFile(corpus, instructions="Place the TREC disks at {path}")
    dataset_id = register(Dataset(TrecQueries(topics)))
    with pytest.raises(DatasetUnavailableError, match=r"(?s)could not get the files for its queries.*"
                                                      r"Place the TREC disks at") as caught:
        IrDatasetsSource(dataset_id).topics()
    assert caught.value.expected == [str(corpus)]


def test_other_errors_keep_their_type_and_name_the_dataset(tmp_path, register):
    dataset_id = register(tiny_dataset(tmp_path, docs="d1\tonly two columns\n"))
    with pytest.raises(RuntimeError, match="expected 4 fields, got 2") as caught:
        IrDatasetsSource(dataset_id).documents()["d1"]
    assert any(dataset_id in note for note in getattr(caught.value, "__notes__", [dataset_id]))


# --- the real registry ---------------------------------------------------------------


@pytest.mark.parametrize(
    "dataset_id, parts",
    [
        ("msmarco-document/trec-dl-2019/judged", {"topics", "qrels", "candidates", "documents"}),
        ("msmarco-document/dev", {"topics", "qrels", "candidates", "documents"}),
        ("msmarco-passage/dev/small", {"topics", "qrels", "candidates", "documents"}),
        ("msmarco-passage/trec-dl-2019/judged", {"topics", "qrels", "candidates", "documents"}),
        ("cranfield", {"topics", "qrels", "documents"}),
        ("disks45/nocr/trec-robust-2004", {"topics", "qrels", "documents"}),
    ],
)
def test_real_ids_resolve_without_downloading(dataset_id, parts, network):
    source = IrDatasetsSource(dataset_id)
    assert source.provides() == parts
    if "candidates" not in parts:
        with pytest.raises(ValueError, match="common.data.bm25"):
            source.candidates()
    assert network == []


def test_real_trec_topics_accept_their_fields(network):
    assert IrDatasetsSource("disks45/nocr/trec-robust-2004", query_field="description").query_field == "description"
    with pytest.raises(ValueError, match="its fields are query_id, title, description, narrative"):
        IrDatasetsSource("disks45/nocr/trec-robust-2004", query_field="desc")
    assert network == []
