"""The built-in collection: determinism, counts, the BM25 gap it is built for, and the cached source."""

import json
from collections import Counter

import numpy as np
import pytest

from common.data.builtin import SPLITS, VERSION, build_builtin, builtin_source, default_root, ensure_builtin, main
from common.data.formats import iter_collection, ranked, read_qrels, read_run, read_topics

FILES = ["collection.jsonl", "manifest.json"] + [
    f"{kind}.{split}.{ext}" for split in SPLITS for kind, ext in (("topics", "tsv"), ("qrels", "txt"), ("bm25", "trec"))
]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_builtin(tmp_path_factory.mktemp("builtin") / "seed0", seed=0)


def test_same_seed_gives_byte_identical_files(built, tmp_path):
    again = build_builtin(tmp_path / "again", seed=0)
    assert sorted(p.name for p in built.iterdir()) == sorted(FILES)
    for name in FILES:
        assert (again / name).read_bytes() == (built / name).read_bytes(), name
    other = build_builtin(tmp_path / "seed1", seed=1)
    assert (other / "collection.jsonl").read_bytes() != (built / "collection.jsonl").read_bytes()
    assert read_topics(other / "topics.test.tsv") != read_topics(built / "topics.test.tsv")


def test_counts_lengths_and_labels(built):
    manifest = json.loads((built / "manifest.json").read_text())
    assert manifest["seed"] == 0 and manifest["generator_version"] == VERSION
    assert manifest["documents"] == 3000
    assert manifest["queries"] == {"train": 600, "dev": 100, "test": 100}

    documents = list(iter_collection(built / "collection.jsonl"))
    assert len({d.doc_id for d in documents}) == 3000
    words = np.array([len(f"{d.title} {d.text}".split()) for d in documents])
    assert words.min() >= 60 and words.max() <= 1600
    assert 0.15 < np.mean(words > 512) < 0.4  # many documents exceed a 512-token model input
    assert all(d.title and len(d.title.split()) <= 6 for d in documents)

    all_qids = set()
    for split in SPLITS:
        topics, qrels = read_topics(built / f"topics.{split}.tsv"), read_qrels(built / f"qrels.{split}.txt")
        assert set(topics) == set(qrels) and not all_qids & set(topics)
        all_qids |= set(topics)
        labels = Counter(label for judged in qrels.values() for label in judged.values())
        assert set(labels) == {0, 1, 2, 3}
        assert all(max(judged.values()) >= 2 for judged in qrels.values())  # every query has an answer


def test_bm25_candidates_hold_a_relevant_document_but_rank_it_low(built):
    from common.metrics import evaluate_run

    for split in SPLITS:
        qrels, run = read_qrels(built / f"qrels.{split}.txt"), read_run(built / f"bm25.{split}.trec")
        assert all(len(run[qid]) == 100 for qid in qrels)
        # Every query can be helped by re-ranking: a relevant document is among its 100 candidates.
        assert all(any(qrels[qid].get(d, 0) > 0 for d in run[qid]) for qid in qrels)
        measures = evaluate_run(qrels, run, ["ndcg_cut_10", "mrr@10", "recall_100"])
        # Keyword-stuffed distractors outrank the paraphrased answers: room for a learned ranker.
        assert 0.12 < measures["ndcg_cut_10"] < 0.4, split
        assert measures["recall_100"] > 0.95, split
        # BM25's top 10 is judged (the pool), so nDCG@10 counts no unjudged document as non-relevant.
        assert all(d in qrels[qid] for qid in qrels for d, _ in ranked(run[qid])[:10])


def test_answers_mostly_word_the_relation_differently(built):
    documents = {d.doc_id: d for d in iter_collection(built / "collection.jsonl")}
    topics, qrels = read_topics(built / "topics.test.tsv"), read_qrels(built / "qrels.test.txt")
    template_words = {"what", "is", "the", "of", "which", "does", "have"}
    answers = literal = 0
    for qid, text in topics.items():
        # Besides template words, a query holds the subject's two names and one relation word.
        content = set(text.split()) - template_words
        for doc_id, label in qrels[qid].items():
            if label == 3:
                sentences = [set(s.split()) for s in documents[doc_id].text.split(". ")]
                answers += 1
                literal += any(content <= words for words in sentences)
    assert answers > 100
    # An answer keeps the query's relation word with probability 1 - paraphrase = 0.2.
    assert 0.1 < literal / answers < 0.3


def test_builtin_source_builds_once_into_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EFFICIENT_RANKERS_CACHE", str(tmp_path))
    source = builtin_source("dev")
    root = default_root(0)
    assert root == tmp_path / "builtin" / f"seed0-v{VERSION}"
    assert source.name == "builtin-dev" and len(source.topics()) == 100
    stamp = (root / "manifest.json").stat().st_mtime_ns
    train = builtin_source("train")
    assert (root / "manifest.json").stat().st_mtime_ns == stamp  # reused, not rebuilt
    qid = next(iter(train.qrels()))
    doc_id = next(iter(train.candidates()[qid]))
    assert train.documents()[doc_id].text
    assert sorted(p.name for p in (tmp_path / "builtin").iterdir()) == [root.name, f"{root.name}.lock"]  # no temporary

    with pytest.raises(ValueError, match="unknown split"):
        builtin_source("validation")
    (tmp_path / "partial").mkdir()
    with pytest.raises(FileExistsError, match="no manifest.json"):
        ensure_builtin(tmp_path / "partial")


def test_build_refuses_to_overwrite(built):
    with pytest.raises(FileExistsError, match="already holds"):
        build_builtin(built, seed=0)


def test_cli_reports_statistics(built, capsys):
    assert main(["--output_dir", str(built)]) == 0
    out = capsys.readouterr().out
    assert "3000 documents" in out
    assert out.count("BM25 nDCG@10") == 3 and "test: 100 queries" in out
