"""conformer_kernel.vocab: ids, IDFs and word2vec IN ‖ OUT embeddings on a hand-made corpus; storage,
the on-disk cache and the checkpoint state."""

import json
import math

import numpy as np
import pytest
import torch
from gensim.models import Word2Vec

from common.data.formats import Document
from conformer_kernel.text import analyze
from conformer_kernel.vocab import UNK, EmbeddingOptions, Resources

QUERIES = ["kiwi kiwi smoothie", "river fish", "the of and"]  # the last one analyses to nothing
DOCUMENTS = [
    Document("D0", title="River fishing", text="The river flows past the mountain. Fish swim, fish eat, fish sleep."),
    Document("D1", text="He fished in the river near the mountain"),
    Document("D2", url="http://orchard.org/trees", title="Apple orchard",
             text="Apples grow on trees by the river mountain"),
    Document("D3", title="Banana bread", text="banana bread with river water"),
    Document("D4", text="zebra crossing by the river"),
    Document("D5", text="quiet lake and forest"),
]
N = len(DOCUMENTS)
OPTIONS = EmbeddingOptions(dim=8, window=10, min_count=2, epochs=5, seed=3, workers=1)


def _idf(df: int) -> float:
    return max(math.log((N - df + 0.5) / (df + 0.5)), 0.0)


def _sentences() -> list[list[str]]:
    """The word2vec corpus the module documents: each analysed query, then one sentence per non-empty field."""
    sentences = [t for q in QUERIES if (t := analyze(q))]
    for doc in DOCUMENTS:
        sentences += [t for part in (doc.url, doc.title, doc.text) if (t := analyze(part))]
    return sentences


@pytest.fixture(scope="module")
def resources() -> Resources:
    return Resources.build(QUERIES, DOCUMENTS, OPTIONS, progress=False)


def test_analysis_of_the_chosen_words():
    """The IDF expectations below rest on these analyses (stemming, stop words, URL split)."""
    assert analyze(DOCUMENTS[0].text) == ["river", "flow", "past", "mountain", "fish", "swim", "fish", "eat", "fish",
                                          "sleep"]
    assert analyze(DOCUMENTS[1].text) == ["fish", "river", "mountain"]  # fished -> fish; 'he', 'in', 'near' dropped
    assert analyze(DOCUMENTS[2].url) == ["http", "orchard", "org", "tree"]
    assert analyze(DOCUMENTS[2].title) == ["apple", "orchard"]
    assert analyze(DOCUMENTS[3].title + " " + DOCUMENTS[3].text) == ["banana", "bread", "banana", "bread", "river",
                                                                       "water"]
    assert analyze(DOCUMENTS[4].text) == ["zebra", "crossing", "river"]
    assert analyze(QUERIES[2]) == []


def test_special_ids_and_vocabulary(resources):
    assert resources.terms[:3] == ["UNK", "<S>", "</S>"]
    assert UNK == 0 and resources.id("UNK") == 0 and resources.id("<S>") == 1 and resources.id("</S>") == 2
    counts: dict[str, int] = {}
    for sentence in _sentences():
        for t in sentence:
            counts[t] = counts.get(t, 0) + 1
    assert counts["river"] == 7 and counts["fish"] == 5 and counts["kiwi"] == 2 and counts["zebra"] == 1
    # min_count=2: exactly the words seen at least twice (queries included), most frequent first
    assert set(resources.terms[3:]) == {t for t, c in counts.items() if c >= 2}
    assert len(resources.terms) == len(set(resources.terms)) == len(resources)
    assert resources.terms[3] == "river"
    frequencies = [counts[t] for t in resources.terms[3:]]
    assert frequencies == sorted(frequencies, reverse=True)
    for i, term in enumerate(resources.terms):
        assert resources.id(term) == i
    assert "kiwi" in resources.ids  # a query-only word enters the embedding vocabulary ...
    assert "kiwi" not in resources.idf  # ... but has no IDF (IDFs are over documents only)
    assert "zebra" not in resources.ids and resources.id("zebra") == 0  # rare: dropped from the terms (UNK) ...
    assert resources.idf["zebra"] == _idf(1)  # ... but keeps its IDF
    assert resources.id("never-seen") == 0 and resources.id("") == 0


def test_idf_by_hand(resources):
    expected = {
        "fish": _idf(2),  # D0 three times (once counted) and D1 through the stem of 'fished'
        "orchard": _idf(1),  # D2's URL and title: one document
        "http": _idf(1),  # URL terms count
        "banana": _idf(1),  # title and body of D3
        "bread": _idf(1),
        "lake": _idf(1),
        "apple": _idf(1),
        "tree": _idf(1),
    }
    for term, value in expected.items():
        assert resources.idf[term] == value, term
    assert resources.idf["fish"] == pytest.approx(math.log(4.5 / 2.5), abs=0, rel=1e-15)
    assert resources.idf["orchard"] == pytest.approx(math.log(5.5 / 1.5), abs=0, rel=1e-15)
    # river is in 5 of 6 documents (negative IDF, clipped to 0), mountain in 3 (log 1 = 0): both absent
    assert _idf(5) == 0.0 and _idf(3) == 0.0
    assert "river" not in resources.idf and "mountain" not in resources.idf
    assert all(v > 0 for v in resources.idf.values())
    # every document term with df <= 2 has an IDF, and nothing else is there
    df: dict[str, int] = {}
    for doc in DOCUMENTS:
        for t in set(analyze(" ".join((doc.url, doc.title, doc.text)))):
            df[t] = df.get(t, 0) + 1
    assert resources.idf == {t: _idf(c) for t, c in df.items() if c <= 2}
    assert resources.idf.keys() == {t for t, c in df.items() if _idf(c) > 0}


def _word2vec(sentences, options: EmbeddingOptions) -> Word2Vec:
    """gensim's skip-gram with the module's documented settings (fastText's lr, negatives, sub-sampling)."""
    return Word2Vec(sentences=sentences, vector_size=options.dim, window=options.window, min_count=options.min_count,
                    sg=1, epochs=options.epochs, seed=options.seed, workers=1, alpha=0.05, sample=1e-4, negative=5)


def _check_in_and_out(res: Resources, w2v: Word2Vec, dim: int, terms) -> None:
    assert w2v.wv.index_to_key == res.terms[3:]
    for term in terms:
        row = res.embeddings[res.id(term)]
        np.testing.assert_array_equal(row[:dim], w2v.wv[term].astype(np.float32))
        np.testing.assert_array_equal(row[dim:], w2v.syn1neg[w2v.wv.key_to_index[term]].astype(np.float32))


def test_embeddings_are_in_and_out_vectors(resources):
    emb = resources.embeddings
    assert emb.dtype == np.float32 and emb.shape == (len(resources), 2 * OPTIONS.dim)
    assert not emb[:3].any()  # UNK, <S>, </S> are zero vectors
    assert (np.abs(emb[3:, :8]).sum(axis=1) > 0).all()  # IN vectors start random
    # the same gensim training, by hand: IN vectors (wv) then OUT vectors (syn1neg)
    _check_in_and_out(resources, _word2vec(_sentences(), OPTIONS), 8, ("river", "fish", "kiwi"))


def _random_corpus(seed: int = 0) -> list[Document]:
    """100 documents of 30 words out of 500: big enough that sub-sampling (1e-4) keeps most words, so
    the OUT vectors (zero before training) are trained."""
    rng = np.random.default_rng(seed)
    words = [f"w{i}x" for i in range(500)]
    assert analyze(" ".join(words[:3])) == ["w0x", "w1x", "w2x"]
    return [Document(f"R{i}", text=" ".join(rng.choice(words, 30))) for i in range(100)]


def test_trained_out_vectors_and_seed():
    docs = _random_corpus()
    options = EmbeddingOptions(dim=6, window=5, min_count=2, epochs=2, seed=1, workers=1)
    res = Resources.build(["w1x w2x"], docs, options, progress=False)
    assert res.embeddings.shape == (len(res), 12)
    assert (np.abs(res.embeddings[3:, 6:]).sum(axis=1) > 0).all()  # every OUT vector was trained
    sentences = [["w1x", "w2x"]] + [analyze(d.text) for d in docs]
    _check_in_and_out(res, _word2vec(sentences, options), 6, res.terms[3:])
    again = Resources.build(["w1x w2x"], docs, options, progress=False)
    np.testing.assert_array_equal(again.embeddings, res.embeddings)
    other = Resources.build(["w1x w2x"], docs, EmbeddingOptions(dim=6, window=5, min_count=2, epochs=2, seed=2, workers=1),
                            progress=False)
    assert other.terms == res.terms
    assert not np.allclose(other.embeddings[3:, :6], res.embeddings[3:, :6])
    assert not np.allclose(other.embeddings[3:, 6:], res.embeddings[3:, 6:])


def test_build_is_a_function_of_the_seed(resources):
    again = Resources.build(QUERIES, iter(DOCUMENTS), OPTIONS, progress=False)  # any iterable of documents
    assert again.terms == resources.terms and again.idf == resources.idf
    np.testing.assert_array_equal(again.embeddings, resources.embeddings)
    other = Resources.build(QUERIES, DOCUMENTS, EmbeddingOptions(dim=8, window=10, min_count=2, epochs=5, seed=4, workers=1), progress=False)
    assert other.terms == resources.terms and other.idf == resources.idf  # only the vectors depend on the seed
    assert not np.allclose(other.embeddings[3:], resources.embeddings[3:])
    np.testing.assert_array_equal(other.embeddings[:3], 0.0)


def test_min_count_one_keeps_every_word():
    res = Resources.build(QUERIES, DOCUMENTS, EmbeddingOptions(dim=4, window=10, min_count=1, epochs=1, seed=0, workers=1), progress=False)
    words = {t for s in _sentences() for t in s}
    assert set(res.terms[3:]) == words and len(res) == 3 + len(words)
    assert res.embeddings.shape == (3 + len(words), 8)
    assert res.id("zebra") > 2 and res.idf["zebra"] == _idf(1)


def test_no_documents():
    with pytest.raises(ValueError, match="no documents"):
        Resources.build(QUERIES, [], OPTIONS, progress=False)


def test_save_load_round_trip(resources, tmp_path):
    folder = tmp_path / "nested" / "res"
    resources.save(folder, meta={"hello": 1})
    assert sorted(p.name for p in folder.iterdir()) == ["embeddings.npy", "idf.tsv", "meta.json", "terms.txt"]
    assert [p.name for p in folder.parent.iterdir()] == ["res"]  # no temporary folder left beside it
    assert json.loads((folder / "meta.json").read_text()) == {"hello": 1}
    loaded = Resources.load(folder)
    assert loaded.terms == resources.terms
    assert loaded.idf == resources.idf  # floats exactly (repr round trip)
    assert all(loaded.idf[t] == v for t, v in resources.idf.items())
    assert loaded.embeddings.dtype == np.float32
    np.testing.assert_array_equal(loaded.embeddings, resources.embeddings)
    assert loaded.id("fish") == resources.id("fish") and loaded.id("zebra") == 0

    with pytest.raises(FileExistsError):
        resources.save(folder)
    assert Resources.load(folder).terms == resources.terms  # untouched

    bare = Resources(["UNK", "<S>", "</S>", "x"], {"x": 0.1 + 0.2, "y": 1e-300})  # no embeddings
    bare.save(tmp_path / "bare")
    assert not (tmp_path / "bare" / "embeddings.npy").exists()
    assert json.loads((tmp_path / "bare" / "meta.json").read_text()) == {}
    back = Resources.load(tmp_path / "bare")
    assert back.embeddings is None and back.idf == {"x": 0.1 + 0.2, "y": 1e-300} and back.terms == bare.terms


def _folders(root):
    """The cached folders in `root` (not the lock files their builds leave, `common.io.build_lock`)."""
    return [p for p in root.iterdir() if p.is_dir()]


def test_cached_builds_once_per_key(resources, tmp_path, monkeypatch):
    monkeypatch.setenv("EFFICIENT_RANKERS_CACHE", str(tmp_path / "cache"))
    real_build = Resources.build.__func__
    calls = []

    def counting_build(cls, queries, documents, options, progress=True):
        calls.append(options)
        if len(calls) > 2:
            raise AssertionError("rebuilt a cached corpus")
        return real_build(cls, queries, documents, options, progress=False)

    monkeypatch.setattr(Resources, "build", classmethod(counting_build))
    first = Resources.cached({"corpus": "a"}, QUERIES, DOCUMENTS, OPTIONS)
    assert len(calls) == 1
    root = tmp_path / "cache" / "conformer_kernel"
    (folder,) = _folders(root)
    assert folder.name.startswith("resources-")
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["corpus"] == {"corpus": "a"} and meta["options"]["seed"] == 3 and meta["options"]["dim"] == 8
    assert first.terms == resources.terms and first.idf == resources.idf
    np.testing.assert_array_equal(first.embeddings, resources.embeddings)

    second = Resources.cached({"corpus": "a"}, QUERIES, DOCUMENTS, OPTIONS)  # from disk
    assert len(calls) == 1
    assert second.terms == first.terms and second.idf == first.idf
    np.testing.assert_array_equal(second.embeddings, first.embeddings)

    Resources.cached({"corpus": "b"}, QUERIES, DOCUMENTS, OPTIONS)  # another key: another folder
    assert len(calls) == 2
    assert len(_folders(root)) == 2
    with pytest.raises(AssertionError, match="rebuilt"):  # other options are another key too
        Resources.cached({"corpus": "a"}, QUERIES, DOCUMENTS, EmbeddingOptions(dim=8, window=10, min_count=2, epochs=5, seed=4, workers=1))
    Resources.cached({"corpus": "a"}, QUERIES, DOCUMENTS, OPTIONS)
    Resources.cached({"corpus": "b"}, QUERIES, DOCUMENTS, OPTIONS)
    assert len(calls) == 3 and len(_folders(root)) == 2  # the failed build left none


def test_state_round_trip_through_torch_save(resources, tmp_path):
    state = resources.state()
    assert set(state) == {"terms", "idf"}  # the embeddings live in the model's weights
    path = tmp_path / "state.pt"
    torch.save({"resources": state}, path)
    loaded = torch.load(path, weights_only=True)["resources"]
    back = Resources.from_state(loaded)
    assert back.terms == resources.terms and back.idf == resources.idf and back.embeddings is None
    assert back.id("fish") == resources.id("fish") and back.id("zebra") == 0
    back.terms.append("extra")  # a copy: the state is not aliased
    assert "extra" not in loaded["terms"]
