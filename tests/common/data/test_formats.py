"""TREC topics, qrels, runs and collections (common.data.formats)."""

import gzip
import json

import pytest

from common.data.formats import (DataFormatError, Document, iter_collection, ranked, read_qrels, read_run, read_topics,
                                 write_collection, write_qrels, write_run, write_topics)


def write(path, text: str):
    path.write_text(text, encoding="utf-8")
    return path


# --- well-formed input -------------------------------------------------------


def test_qrels_graded_negative_and_comments(tmp_path):
    path = write(tmp_path / "qrels", "# judged by NIST\n1 0 d1 2\n1 0 d2 -1\n\n2 Q0 d#3 0\n")
    assert read_qrels(path) == {"1": {"d1": 2, "d2": -1}, "2": {"d#3": 0}}


def test_run_ignores_rank_column_and_orders_like_trec_eval(tmp_path):
    path = write(tmp_path / "run", "1 Q0 a 3 1.5 x\n1 Q0 b 1 1.5 x\n1 Q0 c 2 2.0 x\n")
    run = read_run(path)
    assert run == {"1": {"a": 1.5, "b": 1.5, "c": 2.0}}
    # trec_eval: score descending, ties by docid descending ("b" > "a").
    assert [doc for doc, _ in ranked(run["1"])] == ["c", "b", "a"]


def test_run_round_trip_keeps_full_precision(tmp_path):
    run = {"q1": {"d1": 0.1 + 0.2, "d2": -3.0e-12, "d3": 7.0}}
    write_run(tmp_path / "run.trec", run, tag="bm25")
    lines = (tmp_path / "run.trec").read_text().splitlines()
    assert lines[0] == "q1 Q0 d3 1 7.0 bm25"
    assert lines[1] == "q1 Q0 d1 2 0.30000000000000004 bm25"
    assert read_run(tmp_path / "run.trec") == run


def test_run_depth_cut(tmp_path):
    write_run(tmp_path / "run", {"q": {f"d{i}": float(i) for i in range(10)}}, depth=3)
    assert list(read_run(tmp_path / "run")["q"]) == ["d9", "d8", "d7"]


def test_topics_and_qrels_round_trip(tmp_path):
    topics = {"101": "what is a conformer", "102": "café au lait"}
    qrels = {"101": {"d1": 3, "d2": 0}, "102": {"d9": -1}}
    write_topics(tmp_path / "t.tsv", topics)
    write_qrels(tmp_path / "q.txt", qrels)
    assert read_topics(tmp_path / "t.tsv") == topics
    assert read_qrels(tmp_path / "q.txt") == qrels


@pytest.mark.parametrize("name", ["docs.tsv", "docs.jsonl", "docs.jsonl.gz"])
def test_collection_round_trip(tmp_path, name):
    docs = [Document("d1", "First sentence. Second one.", "A title"), Document("d2", "no title here")]
    path = tmp_path / name
    if name.endswith(".gz"):
        write_collection(tmp_path / "plain.jsonl", docs)
        path.write_bytes(gzip.compress((tmp_path / "plain.jsonl").read_bytes()))
    else:
        write_collection(path, docs)
    assert list(iter_collection(path)) == docs


def test_tsv_collection_layouts(tmp_path):
    path = write(tmp_path / "c.tsv", "d1\tjust text\nd2\tTitle\tbody\nD3\thttp://x.org/\tMS MARCO title\tMS MARCO body\n")
    assert list(iter_collection(path)) == [
        Document("d1", "just text", ""),
        Document("d2", "body", "Title"),
        Document("D3", "MS MARCO body", "MS MARCO title", "http://x.org/"),  # the url column is kept
    ]


def test_jsonl_collection_with_and_without_url(tmp_path):
    path = write(
        tmp_path / "c.jsonl",
        '{"doc_id": "D1", "url": "https://en.wikipedia.org/wiki/Cat", "title": "Cat", "text": "A small feline."}\n'
        '{"doc_id": "D2", "text": "no url, no title"}\n'
        '{"doc_id": "D3", "url": null, "text": "null url"}\n',
    )
    assert list(iter_collection(path)) == [
        Document("D1", "A small feline.", "Cat", "https://en.wikipedia.org/wiki/Cat"),
        Document("D2", "no url, no title"),
        Document("D3", "null url", "", ""),
    ]


def test_url_round_trip_and_jsonl_writes_url_only_when_present(tmp_path):
    docs = [Document("D1", "body", "T", "http://a.example/1"), Document("D2", "plain", "U")]
    write_collection(tmp_path / "c.jsonl", docs)
    assert (tmp_path / "c.jsonl").read_text(encoding="utf-8").splitlines() == [
        '{"doc_id": "D1", "url": "http://a.example/1", "title": "T", "text": "body"}',
        '{"doc_id": "D2", "title": "U", "text": "plain"}',  # byte-identical to the url-less format
    ]
    assert list(iter_collection(tmp_path / "c.jsonl")) == docs
    # The TSV writer keeps its three columns (docid title text): the url is not written there.
    write_collection(tmp_path / "c.tsv", docs)
    assert (tmp_path / "c.tsv").read_text(encoding="utf-8") == "D1\tT\tbody\nD2\tU\tplain\n"
    assert list(iter_collection(tmp_path / "c.tsv")) == [Document("D1", "body", "T"), Document("D2", "plain", "U")]


def test_positional_document_keeps_its_three_fields():
    doc = Document("d", "text", "title")
    assert (doc.doc_id, doc.text, doc.title, doc.url) == ("d", "text", "title", "")
    assert doc != Document("d", "text", "title", "http://x/")


def test_collection_is_streamed(tmp_path):
    path = write(tmp_path / "c.jsonl", '{"doc_id": "1", "text": "ok"}\nnot json at all\n')
    stream = iter_collection(path)
    assert next(stream) == Document("1", "ok")  # the bad second line is not read yet
    with pytest.raises(DataFormatError):
        next(stream)


# --- malformed input: file and line named --------------------------------------


@pytest.mark.parametrize(
    ("reader", "text", "line", "reason"),
    [
        (read_qrels, "1 0 d1 1\n1 0 d2\n", 2, "expected 4 fields"),
        (read_qrels, "1 0 d1 1\n\n1 0 d2 high\n", 3, "relevance 'high' is not an integer"),
        (read_qrels, "1 0 d1 1\n1 0 d1 2\n", 2, "duplicate judgment for query '1', document 'd1'"),
        (read_run, "1 Q0 d1 1 0.5 t\n1 Q0 d2 2 t\n", 2, "expected 6 fields"),
        (read_run, "1 Q0 d1 first 0.5 t\n", 1, "rank 'first' is not an integer"),
        (read_run, "1 Q0 d1 1 high t\n", 1, "score 'high' is not a number"),
        (read_run, "1 Q0 d1 1 nan t\n", 1, "score is NaN"),
        (read_run, "1 Q0 d1 1 0.5 t\n2 Q0 d1 1 0.5 t\n1 Q0 d1 2 0.4 t\n", 3, "document 'd1' retrieved twice for query '1'"),
        (read_topics, "1\tfirst\n2 no tab here\n", 2, "expected 'qid<TAB>text'"),
        (read_topics, "1\tfirst\n1\tagain\n", 2, "duplicate topic id '1'"),
    ],
)
def test_malformed_line_is_named(tmp_path, reader, text, line, reason):
    path = write(tmp_path / "input.txt", text)
    with pytest.raises(DataFormatError) as error:
        reader(path)
    assert error.value.path == str(path) and error.value.line == line
    assert str(error.value).startswith(f"{path}:{line}: ") and reason in str(error.value)


@pytest.mark.parametrize(
    ("name", "text", "line", "reason"),
    [
        ("c.jsonl", '{"doc_id": "1", "text": "a"}\n{"doc_id": "2", "text": \n', 2, "invalid JSON"),
        ("c.jsonl", '{"doc_id": "1", "text": "a"}\n{"id": "2", "text": "b"}\n', 2, '"doc_id" and "text"'),
        ("c.tsv", "d1\ttext\nd2\n", 2, "expected 2-4 tab-separated columns"),
        ("c.tsv", "d1\ttext\n\ttext\n", 2, "empty document id"),
    ],
)
def test_malformed_collection_line_is_named(tmp_path, name, text, line, reason):
    path = write(tmp_path / name, text)
    with pytest.raises(DataFormatError, match=f"{path}:{line}: .*{reason}"):
        list(iter_collection(path))


def test_non_utf8_file_is_decoded_not_crashed(tmp_path):
    path = tmp_path / "topics.tsv"
    path.write_bytes("1\tsmörgåsbord\n".encode("cp1252") + "2\tnaïve\n".encode("utf-8"))
    assert read_topics(path) == {"1": "smörgåsbord", "2": "naïve"}


def test_missing_file_and_unknown_format(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        read_qrels(tmp_path / "absent")
    with pytest.raises(ValueError, match="cannot tell the collection format"):
        list(iter_collection(write(tmp_path / "docs.xml", "<doc/>")))


# --- writers: atomic and never silently overwriting ----------------------------


def test_writers_refuse_to_overwrite(tmp_path):
    write_run(tmp_path / "run", {"q": {"d": 1.0}})
    with pytest.raises(FileExistsError):
        write_run(tmp_path / "run", {"q": {"d": 2.0}})
    write_run(tmp_path / "run", {"q": {"d": 2.0}}, overwrite=True)
    assert read_run(tmp_path / "run") == {"q": {"d": 2.0}}


def test_writer_leaves_nothing_on_bad_value(tmp_path):
    with pytest.raises(ValueError, match="tab, newline"):
        write_topics(tmp_path / "t.tsv", {"1": "fine", "2": "broken\nquery"})
    with pytest.raises(ValueError, match="run tag"):
        write_run(tmp_path / "run", {"q": {"d": 1.0}}, tag="my run")
    assert list(tmp_path.iterdir()) == []


def test_jsonl_writer_keeps_unicode(tmp_path):
    write_collection(tmp_path / "c.jsonl", [Document("é", "naïve\ttab", "t")])
    assert json.loads((tmp_path / "c.jsonl").read_text(encoding="utf-8")) == {"doc_id": "é", "title": "t", "text": "naïve\ttab"}


def test_ranking_ties_in_single_precision_like_trec_eval():
    # 1.00000001 and 1.0 are the same C float, so trec_eval 9.0.8 orders them by docid.
    assert [doc for doc, _ in ranked({"a": 1.00000001, "b": 1.0, "c": 0.5})] == ["b", "a", "c"]
    assert ranked({"a": 1.00000001})[0][1] == 1.00000001


def test_run_ignores_text_after_the_tag_like_trec_eval(tmp_path):
    # trec_eval's own quicktest run results.trunc has "junk at end of lines".
    path = write(tmp_path / "run", "301\tQ0\tFBIS3-27619\t99\t  2.138276\tSTANDARD more junk at\n")
    assert read_run(path) == {"301": {"FBIS3-27619": 2.138276}}
