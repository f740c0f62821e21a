"""`common.commands.store_options.open_collection`: the documents an index command's ``--collection`` names."""

import json

from common.data.formats import Document, write_collection
from common.commands.store_options import open_collection

HITS = [{"query": "a query", "hits": [
    {"qid": "q1", "docid": "d2", "rank": 1, "score": 2.0, "content": "second passage"},
    {"qid": "q1", "docid": "d1", "rank": 2, "score": 1.0, "content": "first passage"}]},
    {"query": "another", "hits": [{"qid": "q2", "docid": "d1", "rank": 1, "score": 3.0, "content": "first passage"}]}]


def test_a_rank_llm_file_gives_the_text_of_its_hits_each_once(tmp_path):
    path = tmp_path / "rank_llm.BM25.retrieve_results_x.json"
    path.write_text(json.dumps(HITS))
    documents = open_collection(str(path))
    assert list(documents) == ["d2", "d1"]  # in the file's order, d1 once though two queries hit it
    assert documents["d1"].text == "first passage" and documents["d2"].text == "second passage"


def test_a_jsonl_collection_is_still_a_collection_file(tmp_path, monkeypatch):
    monkeypatch.setenv("EFFICIENT_RANKERS_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "docs.jsonl"
    write_collection(path, [Document("a", "alpha text"), Document("b", "beta text")])
    documents = open_collection(str(path))
    assert sorted(documents) == ["a", "b"] and documents["b"].text == "beta text"
