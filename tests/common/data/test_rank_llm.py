"""`common.data.rank_llm`: rank_llm candidate files as tasks (topics, candidates and text in one JSON)."""

import json

import pytest

from common.data.formats import DataFormatError, Document, write_qrels
from common.data.rank_llm import RankLLMSource, read_rank_llm
from common.data.specs import source_from_spec
from common.metrics import evaluate_run

ENTRIES = [
    {"query": "flea life cycle", "hits": [
        {"qid": 7, "docid": "a", "rank": 1, "score": 3.5, "content": "Fleas live a year."},
        {"qid": 7, "docid": "b", "rank": 2, "score": 2.0, "content": "Cats."},
    ]},
    {"query": "cat food", "hits": [
        {"qid": 9, "docid": "b", "rank": 1, "score": 9.0, "content": "Cats."},
    ]},
    {"query": "no hits", "hits": []},
]


def _write(path, entries) -> str:
    path.write_text(json.dumps(entries))
    return str(path)


def test_topics_candidates_and_documents(tmp_path):
    task = read_rank_llm(_write(tmp_path / "c.json", ENTRIES))
    assert task.topics == {"7": "flea life cycle", "9": "cat food"}  # an entry without hits has no qid
    assert task.candidates == {"7": {"a": 3.5, "b": 2.0}, "9": {"b": 9.0}}
    assert list(task.documents) == ["a", "b"] and len(task.documents) == 2  # "b" is a hit of both queries
    assert task.documents["a"] == Document("a", "Fleas live a year.")
    assert task.documents.get_many(["b", "a"])[0].text == "Cats."
    with pytest.raises(KeyError, match="document 'z' is not in .*c.json"):
        task.documents["z"]


def test_a_spec_with_qrels(tmp_path):
    write_qrels(tmp_path / "qrels.txt", {"7": {"a": 2, "zz": 3}})
    spec = {"rank_llm_path": _write(tmp_path / "c.json", ENTRIES), "qrels_path": str(tmp_path / "qrels.txt")}
    source = source_from_spec(spec)
    assert isinstance(source, RankLLMSource) and source.name == "c"
    assert source.qrels() == {"7": {"a": 2, "zz": 3}}
    assert "zz" not in source.documents() and "a" in source.documents()


@pytest.mark.parametrize("entries, message", [
    ({"query": "x"}, "expected a JSON list"),
    ([{"hits": []}], r"entry 1: expected \{\"query\": text, \"hits\": \[...\]\}"),
    ([{"query": "x", "hits": [{"qid": 1, "docid": "a", "score": 1.0}]}], "entry 1, hit 1: expected qid, docid, score"),
    ([{"query": "x", "hits": [{"qid": 1, "docid": "a", "score": 1, "content": "t"}] * 2}],
     "entry 1, hit 2: document 'a' repeated for query '1'"),
    ([ENTRIES[0], {"query": "y", "hits": [{"qid": 8, "docid": "a", "score": 1, "content": "other"}]}],
     "entry 2, hit 1: document 'a' has two texts"),
    ([{"query": "x", "hits": []}], "no hits: nothing to re-rank"),
])
def test_malformed_files_name_the_file_and_entry(tmp_path, entries, message):
    path = _write(tmp_path / "bad.json", entries)
    with pytest.raises(DataFormatError, match=f"^{path}: {message}"):
        read_rank_llm(path)


def test_not_json_names_the_line(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('[\n{"query": "x",\n "hits": [}\n]')
    with pytest.raises(DataFormatError, match=f"^{path}:3: not JSON"):
        read_rank_llm(path)


def test_trec_dl_2019_bm25_candidates(shared_data):
    """The shared DL 2019 file: 43 queries x 100 hits (4,297 passages), BM25's published effectiveness."""
    folder = shared_data / "trec_dl"
    source = RankLLMSource(folder / "candidates_with_text/rank_llm.BM25.retrieve_results_dl19.json",
                           folder / "qrels/qrels.dl19-passage.txt")
    assert len(source.topics()) == 43 and {len(c) for c in source.candidates().values()} == {100}
    assert len(source.documents()) == 4297
    assert source.topics()["264014"] == "how long is life cycle of flea"
    assert source.documents()["5611210"].text.startswith("5. Cancel. A flea can live up to a year")
    # BM25 (Pyserini, k1 0.9, b 0.4) on DL19 passages: NDCG@10 0.5058, with -l 2 MAP@100 0.2476 and RR 0.7036.
    ndcg = evaluate_run(source.qrels(), source.candidates(), ["ndcg_cut_10"])
    binary = evaluate_run(source.qrels(), source.candidates(), ["map", "recip_rank"], relevance_level=2)
    assert round(ndcg["ndcg_cut_10"], 4) == 0.5058
    assert (round(binary["map"], 4), round(binary["recip_rank"], 4)) == (0.2476, 0.7036)
