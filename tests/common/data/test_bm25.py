"""BM25 first stage: a score checked by hand, ranking order and ties, the command line, Cranfield."""

import json
import math

import pytest

from common.data.bm25 import BM25Index, DuplicateDocumentError, UnindexableError, bm25_retrieve, main
from common.data.formats import Document, read_qrels, read_run, write_collection, write_topics

# Tokens after lower-casing, Lucene's stopwords ("the", "on", "a", "and") and Porter ("cats" -> "cat"):
#   d1: cat sat mat        (3)      d3: bird sang         (2)
#   d2: dog chase cat      (3)      d4: cat cat cat       (3), title "cat" + text "cats cat"
DOCS = [
    Document("d1", "the cat sat on the mat"),
    Document("d2", "dogs chase cats"),
    Document("d3", "a bird sang"),
    Document("d4", "cats cat", title="cat"),
]


def test_score_matches_lucene_bm25_by_hand():
    # N = 4, df(cat) = 3, avgdl = (3 + 3 + 2 + 3) / 4 = 2.75, k1 = 0.9, b = 0.4.
    # idf (Lucene / Pyserini) = ln(1 + (N - df + 0.5) / (df + 0.5)) = ln(1 + 1.5 / 3.5) = 0.3566749
    # d4: tf = 3, |d| = 3: tf / (tf + k1 * (1 - b + b * |d| / avgdl)) = 3 / (3 + 0.9 * 1.0363636) = 0.7628294
    # score(cat, d4) = 0.3566749 * 0.7628294 = 0.2720821
    # d1, d2: tf = 1, |d| = 3: 1 / (1 + 0.9327273) = 0.5174036 -> 0.1845449 (a tie)
    idf = math.log(1 + (4 - 3 + 0.5) / (3 + 0.5))
    norm = 0.9 * (1 - 0.4 + 0.4 * 3 / 2.75)
    assert idf * 3 / (3 + norm) == pytest.approx(0.2720821, abs=1e-7)

    hits = BM25Index.build(DOCS).search("cat", k=10)
    assert list(hits) == ["d4", "d2", "d1"]  # the d1/d2 tie goes to the larger id, as trec_eval orders it
    assert hits["d4"] == pytest.approx(idf * 3 / (3 + norm), abs=1e-5)
    assert hits["d2"] == pytest.approx(idf * 1 / (1 + norm), abs=1e-5)
    assert hits["d1"] == hits["d2"]


def test_multi_term_query_ranking_and_cutoff():
    index = BM25Index.build(DOCS)
    # "mat" occurs only in d1 (idf ln(1 + 3.5 / 1.5) = 1.204), which lifts it above d4's three "cat"s.
    assert list(index.search("cat on the mat", k=10)) == ["d1", "d4", "d2"]
    # k cuts through the d1/d2 tie deterministically: the larger id makes the cut.
    assert list(index.search("cats", k=2)) == ["d4", "d2"]
    assert index.search("unicorn", k=10) == {}  # no matching term: nothing, as in Lucene
    assert index.search("the a on", k=10) == {}  # only stopwords: no term at all
    with pytest.raises(ValueError, match="k must be positive"):
        index.search("cat", k=0)


def test_no_stemming_and_duplicate_ids():
    run = bm25_retrieve(DOCS, {"q": "cats"}, stemmer=None)
    assert set(run["q"]) == {"d2", "d4"}  # without Porter, "cats" matches only the literal token
    with pytest.raises(DuplicateDocumentError, match="duplicate document id 'd1'") as raised:
        BM25Index.build(DOCS + [Document("d1", "again")])
    assert (raised.value.position, raised.value.first) == (4, 0)


@pytest.mark.parametrize("documents, message", [
    ([], "no document to index"),
    ([Document("d1", "the a on"), Document("d2", "x y", title="and")], "no document has an indexable term"),
])
def test_a_collection_with_nothing_to_index_is_refused_before_bm25s_sees_it(documents, message):
    with pytest.raises(UnindexableError, match=message):
        BM25Index.build(documents)


def test_cli_writes_a_trec_run_and_refuses_to_overwrite(tmp_path, capsys):
    collection, topics, output = tmp_path / "docs.jsonl", tmp_path / "topics.tsv", tmp_path / "run.trec"
    write_collection(collection, DOCS)
    write_topics(topics, {"1": "cat", "2": "bird song", "3": "unicorn", "4": "the a"})  # 3, 4: no indexed term
    args = ["--collection", str(collection), "--topics", str(topics), "--output", str(output), "-k", "2",
            "--tag", "bm25test"]
    assert main(args) == 0
    # No progress bar off a terminal: the summary is the one line.
    summary = f"wrote {output}: 4 queries over 4 documents, k=2 (2 queries matched no document)\n"
    assert capsys.readouterr().err == summary
    lines = output.read_text().splitlines()
    assert [line.split()[:4] for line in lines] == [["1", "Q0", "d4", "1"], ["1", "Q0", "d2", "2"],
                                                    ["2", "Q0", "d3", "1"]]
    assert all(line.endswith(" bm25test") for line in lines)
    assert read_run(output)["1"]["d4"] == pytest.approx(0.2720821, abs=1e-5)

    before = output.read_text()
    with pytest.raises(SystemExit) as refused:
        main(args)
    assert refused.value.code == 2
    assert capsys.readouterr().err == f"error: argument --output: {output} already exists; pass --overwrite to replace it\n"
    assert output.read_text() == before
    assert main(args[:-2] + ["-k", "1", "--overwrite"]) == 0
    assert len(output.read_text().splitlines()) == 2


def test_bm25_on_cranfield(shared_data):
    from common.metrics import evaluate_run

    folder = shared_data / "cranfield" / "derived"
    documents = []
    for line in (folder / "docs.jsonl").read_text().splitlines():
        record = json.loads(line)
        documents.append(Document(record["doc_id"], record["text"], record["title"]))
    # queries.tsv is ordinal_qid<TAB>original id<TAB>text; the qrels use the ordinal ids.
    topics = {}
    for line in (folder / "queries.tsv").read_text().splitlines():
        qid, _, text = line.split("\t")
        topics[qid] = text
    qrels = read_qrels(folder / "qrels.graded.trec")

    run = bm25_retrieve(documents, topics, k=1000)
    measures = evaluate_run(qrels, run, ["map", "ndcg_cut_10", "recall_100"])
    # Measured with k1 0.9, b 0.4, Porter, Lucene stopwords, title + text: MAP 0.2894, nDCG@10 0.3531,
    # recall@100 0.7250 (no stemming: MAP 0.2676). Published Cranfield BM25 MAPs run 0.3-0.45 with tuned
    # k1/b and binary relevance; the band catches a change of idf, tf or analyzer.
    assert measures["map"] == pytest.approx(0.2894, abs=0.005)
    assert measures["ndcg_cut_10"] == pytest.approx(0.3531, abs=0.005)
    assert measures["recall_100"] == pytest.approx(0.7250, abs=0.005)
