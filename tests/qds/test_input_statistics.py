"""qds.input_statistics: its counts on hand-made files, the densities against the band's closed form, the built-in
pairs' lengths against the official layout counted by hand, its refusals, and the real files' counts (SOURCES.md)."""

import json

import pytest

from qds import input_statistics
from tests.bad_input.refusal import refused_in_process, write_inputs

TOPICS = "1\tthree word query\n2\ttwo words\n3\tone\n"  # 3, 2 and 1 words
HITS = [  # the first hit of each query is read at --top 1: sentences of 4 and 3 words, then of 5 words
    {"query": "q one", "hits": [
        {"qid": 1, "docid": "a", "rank": 1, "score": 2.0, "content": "The cat sat down. It purred loudly."},
        {"qid": 1, "docid": "b", "rank": 2, "score": 1.0, "content": "Never read at top one."}]},
    {"query": "q two", "hits": [
        {"qid": 2, "docid": "c", "rank": 1, "score": 3.0, "content": "Five words are in here."}]},
]


@pytest.fixture
def inputs(tmp_path):
    return write_inputs(tmp_path / "in", {"topics.tsv": TOPICS, "hits.json": json.dumps(HITS)})


def statistics(inputs, tmp_path, *extra: str) -> dict:
    out = tmp_path / "out" / "statistics.json"
    assert input_statistics.main(["--topics", str(inputs / "topics.tsv"), "--rank_llm", str(inputs / "hits.json"),
                                  "--top", "1", "--depth", "1", "--output", str(out), *extra]) == 0
    return json.loads(out.read_text())


def test_words_per_query_and_per_sentence_on_hand_made_files(inputs, tmp_path):
    stats = statistics(inputs, tmp_path)
    assert stats["queries"] == {str(inputs / "topics.tsv"): {"count": 3, "mean": 2.0, "max": 3}}
    assert stats["sentences"] == {"candidates": str(inputs / "hits.json"), "queries": 2, "passages_per_query": 1,
                                  "count": 3, "mean": 4.0, "max": 5}


def test_sparse_transformer_density_is_the_band_s_closed_form(inputs, tmp_path):
    """Sparse-Transformer has no global token: its density is the band |i - j| <= w/2 of an n x n matrix,
    n (w + 1) - 2 (1 + ... + w/2) entries, in both layouts."""
    n, w = 300, 16
    density = statistics(inputs, tmp_path, "--n", str(n), "--window", str(w))["density"]
    band = (n * (w + 1) - 2 * sum(range(1, w // 2 + 1))) / n**2
    for layout in ("official", "sos"):
        assert density[layout]["sparse"] == round(band, 6)
        # every other pattern adds global rows and columns to the band
        assert all(density[layout][p] > density[layout]["sparse"] for p in ("qds", "qds_s", "qds_q"))


def test_builtin_pairs_count_the_official_layout_by_hand(inputs, tmp_path):
    """The official layout (`qds.inputs` module docstring): ``<s> <s> query </s>``, ``<s> <s> sentence </s>`` for
    the title and each sentence, a closing ``</s>``: 4 + |q| + sum(|s| + 3) tokens below the 2,048 cut."""
    from common.data.formats import ranked
    from common.data.specs import source_from_spec
    from common.encoders.tokenizers import load_tokenizer
    from qds.sentences import split_sentences

    stats = statistics(inputs, tmp_path)["builtin_pairs"]
    source, tokenizer = source_from_spec("builtin:test"), load_tokenizer("builtin")
    topics, documents, candidates = source.topics(), source.documents(), source.candidates()

    def words(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    lengths = []
    for qid in sorted(candidates):
        doc = documents[ranked(candidates[qid])[0][0]]
        lengths.append(4 + words(topics[qid]) + sum(words(s) + 3 for s in [doc.title, *split_sentences(doc.text)]))
    assert max(lengths) < 2048
    assert stats == {"depth": 1, "max_length": 2048, "count": len(candidates),
                     "mean": round(sum(lengths) / len(lengths), 4), "max": max(lengths)}


def test_refusals_write_nothing(inputs, tmp_path, capsys):
    base = ["--topics", str(inputs / "topics.tsv"), "--rank_llm", str(inputs / "hits.json")]
    existing = tmp_path / "existing.json"
    existing.write_text("{}")
    refused_in_process(input_statistics.main, [*base, "--output", str(existing)], capsys,
                       f"argument --output: {existing} already exists")
    assert existing.read_text() == "{}"
    refused_in_process(input_statistics.main, ["--topics", str(tmp_path / "none.tsv"), "--output",
                                               str(tmp_path / "new.json")], capsys, "argument --topics: no such file")
    (inputs / "bad.tsv").write_text("1\tfine\n1\trepeated\n")
    refused_in_process(input_statistics.main, [*base[2:], "--topics", str(inputs / "bad.tsv"), "--output",
                                               str(tmp_path / "new.json")], capsys, "bad.tsv:2: duplicate topic id")
    assert not (tmp_path / "new.json").exists()


def test_an_odd_window_is_refused_as_the_model_refuses_it(inputs, tmp_path, capsys):
    """Longformer's window is even: an odd one is no window the model could run."""
    base = ["--topics", str(inputs / "topics.tsv"), "--rank_llm", str(inputs / "hits.json")]
    refused_in_process(input_statistics.main, [*base, "--window", "33", "--output", str(tmp_path / "new.json")],
                       capsys, "argument --window: must be even (Longformer's window spans w / 2 each side), got 33")
    assert not (tmp_path / "new.json").exists()


def test_the_real_files_hold_the_counts_sources_md_gives(shared_data, tmp_path):
    """../shared/data/SOURCES.md: MS MARCO document dev 5,193 queries, the 43 judged TREC DL 2019 queries, the 200
    TREC DL 2020 test queries, 43 queries of BM25 hits in the DL 2019 candidate file."""
    trec_dl = shared_data / "trec_dl"
    out = tmp_path / "statistics.json"
    topics = [trec_dl / "topics" / name for name in ("topics.msmarco-doc.dev.txt", "topics.dl19-doc.txt",
                                                      "topics.dl20.txt")]
    input_statistics.main(["--topics", *map(str, topics), "--rank_llm",
                           str(trec_dl / "candidates_with_text" / "rank_llm.BM25.retrieve_results_dl19.json"),
                           "--depth", "1", "--output", str(out)])
    stats = json.loads(out.read_text())
    assert [stats["queries"][str(path)]["count"] for path in topics] == [5193, 43, 200]
    assert stats["sentences"]["queries"] == 43 and stats["sentences"]["passages_per_query"] == 20
