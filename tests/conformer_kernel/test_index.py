"""conformer_kernel.index: the impact index equals the re-ranking scores (query term independence),
its storage (the shards merged out of core, the arrays memory-mapped), resuming an interrupted build, the terms it
indexes, search and the command line."""

import json
import math
import subprocess
import sys

import lightning
import numpy as np
import pytest
import scipy.sparse as sp
import torch

import conformer_kernel.impact_index as impact_index
import conformer_kernel.index as index_module
from common.data.formats import Document, write_collection, write_topics
from common.data.source import FileSource
from conformer_kernel.features import Featurizer
from conformer_kernel.impact_index import (
    ImpactIndex,
    MissingTermsError,
    ShardWriter,
    TermDocumentScorer,
    build_index,
    index_terms,
    load_for_inference,
    merge_shards,
    shard_path,
)
from conformer_kernel.index import main
from conformer_kernel.index_folder import ARRAY_FILES, INDEX_FILES
from conformer_kernel.ranker import ConformerKernelRanker, ranknet_loss
from conformer_kernel.text import analyze
from conformer_kernel.vocab import EmbeddingOptions, Resources
from tests.conformer_kernel import featurizer_of

#: 30 words that the analysis keeps as they are (checked below), drawn Zipf-like so that documents overlap.
WORDS = ("river mountain forest apple banana garden ocean island castle bridge dragon engine rocket planet violin "
         "guitar piano coffee bread cheese tiger zebra eagle salmon winter summer desert valley harbor lantern").split()
N_DOCS, SHARD, BATCH, CHUNK = 40, 7, 3, 4
SHARDS = math.ceil(N_DOCS / SHARD)  # 6, the last one with 5 documents
TOPICS = {
    "q1": "river mountain salmon",  # river and mountain are in most documents: IDF 0
    "q2": "The river and the coffee garden",  # shares 'river' with q1; stop words dropped
    "q3": "tiger tiger zebra",  # a repeated term counts twice
    "q4": "eagle quasar",  # 'quasar' is in no document and not in the embedding vocabulary
    # 24 words, WORDS[27] down to WORDS[4]: only the first 20 analysed terms are indexed (not WORDS[4:8])
    "q5": " ".join(WORDS[4:28][::-1]) + " the of",
}
TRAINER = {"accelerator": "cpu", "devices": 1, "enable_progress_bar": False}
SMALL = dict(hidden_size=16, num_heads=4, num_layers=1, conv_window=3, max_doc_terms=200, pool_window=30,
             pool_stride=10)


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


class Lookup(dict):
    """doc_id -> Document with the `get_many` the index reads documents through."""

    def get_many(self, ids):
        return [self[i] for i in ids]


def _documents() -> list[Document]:
    rng = np.random.default_rng(0)
    p = 1 / np.arange(1, len(WORDS) + 1) ** 0.7
    lengths = rng.integers(2, 30, N_DOCS)
    lengths[[3, 17, 30]] = [260, 45, 90]  # one past max_doc_terms (200), two past a pooling window (30)
    return [Document(f"D{i:02d}", text=" ".join(rng.choice(WORDS, int(n), p=p / p.sum())),
                     title=WORDS[(7 * i) % len(WORDS)] if i % 3 else "", url="http://lantern.org" if i == 5 else "")
            for i, n in enumerate(lengths)]


@pytest.fixture(scope="module")
def corpus():
    docs = _documents()
    assert analyze(" ".join(WORDS)) == WORDS
    # Resources from q1-q3 only: 'quasar' (q4) is out of the vocabulary and has no IDF
    resources = Resources.build([TOPICS[q] for q in ("q1", "q2", "q3")], docs,
                                EmbeddingOptions(dim=8, window=10, min_count=1, epochs=2, seed=0, workers=1), progress=False)
    assert resources.id("quasar") == 0 and "quasar" not in resources.idf
    featurizer = featurizer_of(resources, max_doc_terms=200)
    terms = index_terms([TOPICS], featurizer)
    assert len(terms) >= 20
    order = [str(d) for d in np.random.default_rng(1).permutation([d.doc_id for d in docs])]  # another column order
    return docs, Lookup({d.doc_id: d for d in docs}), resources, featurizer, terms, order


def _model(kind: str, resources: Resources, featurizer: Featurizer, docs) -> ConformerKernelRanker:
    """A tiny model with the word2vec embeddings after one RankNet step in train mode (BatchNorm and
    BatchScale statistics then differ from their initial values), in eval mode."""
    torch.manual_seed(0)
    model = ConformerKernelRanker(model=kind, vocab_size=len(resources), **SMALL)
    model.use_resources(resources)
    model.train()
    rng = np.random.default_rng(2)
    queries = [featurizer.query_terms(TOPICS[q]) for q in ("q1", "q2", "q3", "q5")]
    groups = [[featurizer.document_terms(docs[i]) for i in rng.choice(N_DOCS, 4, replace=False)] for _ in queries]
    labels = torch.tensor(rng.integers(0, 3, (len(queries), 4)))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    loss = ranknet_loss(model(featurizer.batch(queries, groups)), labels)
    loss.backward()
    optimizer.step()
    return model.eval()


@pytest.fixture(scope="module", params=["ndrm1", "ndrm2", "ndrm3"])
def built(request, corpus, tmp_path_factory):
    docs, lookup, resources, featurizer, terms, order = corpus
    model = _model(request.param, resources, featurizer, docs)
    if request.param != "ndrm1":  # BatchScale saw one training batch
        ndrm2 = model.model if request.param == "ndrm2" else model.model.ndrm2
        assert ndrm2.scale_tf.running_mean.item() > 0 and ndrm2.scale_length.running_mean.item() > 1
        assert ndrm2.scale_tf.count.item() == ndrm2.scale_length.count.item() * 20  # 20 query slots per pair
    if request.param == "ndrm3":
        assert not torch.equal(model.model.norm.running_mean, torch.zeros(2))
    folder = tmp_path_factory.mktemp(request.param) / "idx"
    index = build_index(model, featurizer, lookup, order, terms, folder, shard_size=SHARD, batch_size=BATCH,
                        term_chunk=CHUNK, trainer_options=TRAINER)
    assert model.training is False  # still in eval mode after Lightning's predict
    return request.param, model, index, folder


def _direct_scores(model, featurizer, docs, query_terms) -> dict[str, float]:
    """Re-ranking scores: every document with the query in one padded batch, the model's forward."""
    with torch.no_grad():
        scores = model(featurizer.batch([query_terms], [[featurizer.document_terms(d) for d in docs]]))[0]
    return {d.doc_id: float(s) for d, s in zip(docs, scores)}


# --- query term independence --------------------------------------------------------------------------


def test_index_scores_equal_reranking_scores(built, corpus):
    """With the official padding (the default): the index's batches of 3 documents are padded to their longest
    + the convolution's reach, the re-ranking batch to all 200 terms (D03 has 260), and the scores agree."""
    kind, model, index, _ = built
    docs, _, _, featurizer, terms, order = corpus
    assert kind == "ndrm2" or model.hparams.doc_padding == "official"
    assert index.terms == terms and index.doc_ids == order
    assert index.matrix.shape == (len(terms), N_DOCS) and index.matrix.dtype == np.float32
    for qid, text in TOPICS.items():
        query = featurizer.query_terms(text)
        direct = _direct_scores(model, featurizer, docs, query)
        from_index = dict(zip(index.doc_ids, index.score_all(query)))
        assert index.score_all(query).dtype == np.float64
        np.testing.assert_allclose([from_index[d] for d in direct], list(direct.values()), rtol=1e-5, atol=1e-5,
                                   err_msg=f"{kind} {qid}")
        # a candidate set of 10 documents is ordered the same by both
        candidates = [d.doc_id for d in docs[::4]]
        values = sorted(direct[d] for d in candidates)
        gaps = [b - a for a, b in zip(values, values[1:]) if b != a]
        assert min(gaps, default=1.0) > 1e-4, f"{kind} {qid}: near-tie among the candidates"
        by_direct = sorted(candidates, key=lambda d: (-direct[d], d))
        by_index = sorted(candidates, key=lambda d: (-from_index[d], d))
        assert by_direct == by_index, f"{kind} {qid}"
        if kind == "ndrm2":  # exact zeros where no query term occurs, in both
            for d in candidates:
                assert (direct[d] == 0.0) == (from_index[d] == 0.0)
    # a repeated query term counts each time
    tiger = dict(zip(index.doc_ids, index.score_all(["tiger"])))
    zebra = dict(zip(index.doc_ids, index.score_all(["zebra"])))
    q3 = dict(zip(index.doc_ids, index.score_all(featurizer.query_terms(TOPICS["q3"]))))
    assert featurizer.query_terms(TOPICS["q3"]) == ["tiger", "tiger", "zebra"]
    for d in order:
        assert q3[d] == pytest.approx(2 * tiger[d] + zebra[d], rel=1e-12, abs=1e-12)
    # the postings are the per-term scores of the index's own row/column layout
    row = index.rows["eagle"]
    col = index.doc_ids.index("D03")
    single = _direct_scores(model, featurizer, [docs[3]], ["eagle"])["D03"]
    assert index.matrix[row, col] == pytest.approx(single, rel=1e-5, abs=1e-5)


def test_ndrm2_stores_only_nonzero_postings(built, corpus):
    kind, model, index, _ = built
    docs, lookup, resources, featurizer, terms, order = corpus
    present = {(t, d) for d in order for t in set(featurizer.document_terms(lookup[d])) if t in index.rows}
    if kind != "ndrm2":
        assert index.matrix.nnz == len(terms) * N_DOCS  # latent matching: every pair has a score
        return
    # s_td = IDF_t · BS(tf) / (...): nonzero exactly where the term occurs and its IDF is positive
    expected = {(t, d) for t, d in present if resources.idf.get(t, 0.0) > 0}
    assert any(resources.idf.get(t, 0.0) == 0 for t, _ in present)  # 'river' is in most documents
    assert ("quasar", "D00") not in present
    coo = index.matrix.tocoo()
    stored = {(terms[i], order[j]) for i, j in zip(coo.row, coo.col)}
    assert index.matrix.nnz == len(expected) == len(stored)
    assert stored == expected
    assert (coo.data > 0).all()
    assert len(expected) < len(terms) * N_DOCS / 2


def test_folder_and_round_trip(built, corpus, tmp_path):
    kind, model, index, folder = built
    _, lookup, _, featurizer, terms, order = corpus
    assert sorted(p.name for p in folder.iterdir()) == sorted(INDEX_FILES)
    assert not (folder / "shards").exists()
    assert (folder / "terms.txt").read_text().splitlines() == terms
    assert (folder / "doc_ids.txt").read_text().splitlines() == order
    meta = json.loads((folder / "meta.json").read_text())
    assert meta == index.meta
    assert {k: meta[k] for k in ("terms", "documents", "shard_size", "model", "encoder")} == {
        "terms": len(terms), "documents": N_DOCS, "shard_size": SHARD, "model": kind, "encoder": "conformer"}
    loaded = ImpactIndex.load(folder)
    assert loaded.terms == index.terms and loaded.doc_ids == index.doc_ids and loaded.meta == index.meta
    assert loaded.matrix.dtype == np.float32 and loaded.matrix.format == "csr"
    assert (loaded.matrix != index.matrix).nnz == 0
    np.testing.assert_array_equal(loaded.matrix.toarray(), index.matrix.toarray())
    assert loaded.search(["river", "eagle"], 5) == index.search(["river", "eagle"], 5)

    with pytest.raises(FileExistsError, match="already holds an index"):
        build_index(model, featurizer, lookup, order, terms, folder, shard_size=SHARD, trainer_options=TRAINER)
    with pytest.raises(FileExistsError, match="already holds an index"):  # resume does not reopen a finished one
        build_index(model, featurizer, lookup, order, terms, folder, shard_size=SHARD, resume=True,
                    trainer_options=TRAINER)
    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not empty"):
        build_index(model, featurizer, lookup, order, terms, stray, shard_size=SHARD, trainer_options=TRAINER)
    assert [p.name for p in stray.iterdir()] == ["notes.txt"]
    with pytest.raises(FileNotFoundError, match="no complete index"):
        ImpactIndex.load(stray)


# --- the out-of-core merge and the memory-mapped index ---------------------------------------------------


def _in_memory_merge(blocks: list[np.ndarray]) -> sp.csr_matrix:
    """The merge the out-of-core one replaces: every shard's (documents, terms) scores as a CSR block, stacked."""
    return sp.hstack([sp.csr_matrix(block.T) for block in blocks], format="csr", dtype=np.float32)


def _assert_arrays_are(folder, reference: sp.csr_matrix) -> None:
    """The CSR arrays in `folder` are `reference`'s, dtype and bytes."""
    for name, expected in zip(ARRAY_FILES, (reference.data, reference.indices, reference.indptr)):
        written = np.load(folder / name)
        assert written.dtype == expected.dtype, name
        assert written.tobytes() == expected.tobytes(), name


def _write_shards(folder, blocks: list[np.ndarray]) -> None:
    (folder / "shards").mkdir(parents=True)
    for shard, block in enumerate(blocks):
        np.save(shard_path(folder, shard), block)


@pytest.mark.parametrize("chunk", [impact_index.MERGE_CHUNK, 10])  # a shard at once; a few terms at a time
@pytest.mark.parametrize("sizes", [[7, 7, 7, 3], [5]])  # a ragged last shard; a single shard
def test_merge_is_the_in_memory_merge(tmp_path, monkeypatch, chunk, sizes):
    monkeypatch.setattr(impact_index, "MERGE_CHUNK", chunk)
    rng = np.random.default_rng(3)
    terms = 11
    blocks = []
    for n in sizes:
        block = rng.standard_normal((n, terms)).astype(np.float32)  # (documents, terms)
        block[rng.random(block.shape) < 0.3] = 0.0
        block[:, [2, 9]] = 0.0  # terms with no postings in any shard
        block[0, 0] = -0.0  # not stored either
        blocks.append(block)
    blocks[0][:, 5] = 0.0  # a term with no postings in one shard
    _write_shards(tmp_path, blocks)
    merge_shards(tmp_path, len(sizes), terms, sum(sizes))
    reference = _in_memory_merge(blocks)
    assert reference.nnz < terms * sum(sizes) and np.diff(reference.indptr)[[2, 9]].tolist() == [0, 0]
    _assert_arrays_are(tmp_path, reference)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*ARRAY_FILES, "shards"])  # no temporary left
    with pytest.raises(ValueError, match=f"the shards hold {sum(sizes)} documents, not {sum(sizes) + 1}"):
        merge_shards(tmp_path, len(sizes), terms, sum(sizes) + 1)


@pytest.mark.parametrize("built", ["ndrm2", "ndrm3"], indirect=True)  # sparse and dense postings
def test_built_index_is_the_in_memory_merge_of_its_shards(built, corpus, tmp_path, monkeypatch):
    kind, model, index, _ = built
    _, lookup, _, featurizer, terms, order = corpus
    real_merge, shards = impact_index.merge_shards, []

    def keeping_the_shards(folder, count, *args):
        shards.extend(np.load(shard_path(folder, s)) for s in range(count))
        real_merge(folder, count, *args)

    monkeypatch.setattr(impact_index, "merge_shards", keeping_the_shards)
    folder = tmp_path / "idx"
    rebuilt = build_index(model, featurizer, lookup, order, terms, folder, shard_size=SHARD, batch_size=BATCH,
                          term_chunk=CHUNK, trainer_options=TRAINER)
    assert [len(shard) for shard in shards] == [SHARD] * (SHARDS - 1) + [N_DOCS - SHARD * (SHARDS - 1)]
    _assert_arrays_are(folder, _in_memory_merge(shards))
    for part in ("data", "indices", "indptr"):  # the same bytes as the fixture's build
        assert getattr(rebuilt.matrix, part).tobytes() == getattr(index.matrix, part).tobytes(), (kind, part)


def test_loaded_index_is_memory_mapped(built, corpus):
    _, _, index, folder = built
    featurizer = corpus[3]
    loaded = ImpactIndex.load(folder)
    for name, part in zip(ARRAY_FILES, ("data", "indices", "indptr")):
        array = getattr(loaded.matrix, part)
        assert isinstance(array, np.memmap) and (folder / name).samefile(array.filename), part  # not a copy
        assert not array.flags.writeable, part
    in_memory = ImpactIndex(loaded.terms, loaded.doc_ids, sp.csr_matrix(loaded.matrix.toarray()))
    assert not isinstance(in_memory.matrix.data, np.memmap)
    for text in TOPICS.values():
        query = featurizer.query_terms(text)
        assert loaded.score_all(query).tobytes() == in_memory.score_all(query).tobytes()
        assert list(loaded.search(query).items()) == list(in_memory.search(query).items())
    assert isinstance(index.matrix.data, np.memmap)  # what build_index returns is the index it wrote, loaded


def _save(folder, terms, doc_ids, matrix, meta):
    """An index's files as `build_index` writes them (the layout of `conformer_kernel.impact_index`)."""
    folder.mkdir()
    for name, array in zip(ARRAY_FILES, (matrix.data, matrix.indices, matrix.indptr)):
        np.save(folder / name, array)
    (folder / "terms.txt").write_text("".join(f"{t}\n" for t in terms))
    (folder / "doc_ids.txt").write_text("".join(f"{d}\n" for d in doc_ids))
    (folder / "meta.json").write_text(json.dumps(meta))


def test_load_maps_int64_indices_as_they_are(tmp_path):
    dense = np.array([[0.0, 1.5, 0.0], [2.0, 0.0, -1.0]], dtype=np.float32)
    matrix = sp.csr_matrix(dense)
    matrix.indices, matrix.indptr = matrix.indices.astype(np.int64), matrix.indptr.astype(np.int64)
    _save(tmp_path / "idx", ["a", "b"], ["d0", "d1", "d2"], matrix, {"hello": 1})
    assert sorted(p.name for p in (tmp_path / "idx").iterdir()) == sorted(INDEX_FILES)
    _assert_arrays_are(tmp_path / "idx", matrix)
    loaded = ImpactIndex.load(tmp_path / "idx")
    assert loaded.matrix.indices.dtype == loaded.matrix.indptr.dtype == np.int64  # not narrowed (a copy) to int32
    assert isinstance(loaded.matrix.indices, np.memmap) and loaded.meta == {"hello": 1}
    np.testing.assert_array_equal(loaded.matrix.toarray(), dense)
    assert loaded.search(["b", "a"], 2) == {"d0": 2.0, "d1": 1.5}


#: Measures the merge's memory in a fresh process (KiB): its resident set before, and its peak after (VmHWM, this
#: process's own: ru_maxrss starts from the parent's peak, which a vfork-and-exec child inherits).
MEASURE = """
import json, sys
from pathlib import Path
from conformer_kernel.impact_index import merge_shards

def status(key):
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(key + ":"))

before = status("VmRSS")
merge_shards(Path(sys.argv[1]), *map(int, sys.argv[2:]))
print(json.dumps({"before": before, "peak": status("VmHWM")}))
"""


@pytest.mark.slow  # the subprocess imports torch and Lightning (~7 s)
def test_merge_memory_is_bounded_by_one_shard(tmp_path):
    """20 shards of 10 MB, 200 MB (~190 MB of postings and as much of indices): the merge's peak memory grows by
    less than 60 MB (22 MB measured; merging them in memory takes 1.2 GB)."""
    shards, documents, terms = 20, 2500, 1000
    rng = np.random.default_rng(4)
    (tmp_path / "shards").mkdir()
    for shard in range(shards):
        block = rng.standard_normal((documents, terms), dtype=np.float32)  # (documents, terms): 10 MB
        block[block > 1.5] = 0.0
        np.save(shard_path(tmp_path, shard), block)
    done = subprocess.run([sys.executable, "-c", MEASURE, str(tmp_path), str(shards), str(terms),
                           str(shards * documents)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    kib = json.loads(done.stdout)
    assert (tmp_path / "data.npy").stat().st_size > 180e6  # the postings written
    assert kib["peak"] - kib["before"] < 60 * 1024, kib


# --- resuming -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("built", ["ndrm3"], indirect=True)  # the bookkeeping does not depend on the model
def test_resume_computes_only_the_missing_shards(built, corpus, tmp_path, monkeypatch):
    kind, model, index, _ = built
    _, lookup, _, featurizer, terms, order = corpus
    folder = tmp_path / "idx"
    real_write = ShardWriter.write_on_batch_end
    real_predict = TermDocumentScorer.predict_step
    writes, predicted = [], []

    def failing_write(self, trainer, pl_module, prediction, *args, **kwargs):
        real_write(self, trainer, pl_module, prediction, *args, **kwargs)
        writes.append(prediction[0])
        if len(writes) == 2:
            raise RuntimeError("interrupted after the second shard")

    def counting_predict(self, batch, batch_idx):
        predicted.append(batch[0])
        return real_predict(self, batch, batch_idx)

    monkeypatch.setattr(TermDocumentScorer, "predict_step", counting_predict)
    with monkeypatch.context() as m:
        m.setattr(ShardWriter, "write_on_batch_end", failing_write)
        with pytest.raises(RuntimeError, match="interrupted"):
            build_index(model, featurizer, lookup, order, terms, folder, shard_size=SHARD, batch_size=BATCH,
                        term_chunk=CHUNK, trainer_options=TRAINER)
    assert predicted == [0, 1]
    assert sorted(p.name for p in folder.iterdir()) == ["shards"]
    assert sorted(p.name for p in (folder / "shards").iterdir()) == ["0000000.npy", "0000001.npy", "plan.json"]
    plan = json.loads((folder / "shards" / "plan.json").read_text())
    assert plan == index.meta
    shard0 = np.load(folder / "shards" / "0000000.npy")
    assert shard0.shape == (SHARD, len(terms)) and shard0.dtype == np.float32
    np.testing.assert_array_equal(shard0, index.matrix[:, :SHARD].toarray().T)

    with pytest.raises(FileExistsError, match="--resume"):
        build_index(model, featurizer, lookup, order, terms, folder, shard_size=SHARD, trainer_options=TRAINER)
    with pytest.raises(ValueError, match="other terms"):
        build_index(model, featurizer, lookup, order, terms[:-1], folder, shard_size=SHARD, resume=True,
                    trainer_options=TRAINER)
    with pytest.raises(ValueError, match="other terms"):  # another shard size is another plan too
        build_index(model, featurizer, lookup, order, terms, folder, shard_size=SHARD + 1, resume=True,
                    trainer_options=TRAINER)
    with pytest.raises(ValueError, match="other terms"):  # ... and other documents
        build_index(model, featurizer, lookup, order[::-1], terms, folder, shard_size=SHARD, resume=True,
                    trainer_options=TRAINER)
    assert predicted == [0, 1]

    resumed = build_index(model, featurizer, lookup, order, terms, folder, shard_size=SHARD, batch_size=BATCH,
                          term_chunk=CHUNK, resume=True, trainer_options=TRAINER)
    assert SHARDS == 6 and predicted == [0, 1, 2, 3, 4, 5]  # only shards 2-5 the second time
    assert sorted(p.name for p in folder.iterdir()) == sorted(INDEX_FILES)
    assert resumed.terms == index.terms and resumed.doc_ids == index.doc_ids and resumed.meta == index.meta
    assert (resumed.matrix != index.matrix).nnz == 0  # exactly the uninterrupted build
    np.testing.assert_array_equal(resumed.matrix.toarray(), index.matrix.toarray())
    np.testing.assert_array_equal(ImpactIndex.load(folder).matrix.toarray(), index.matrix.toarray())


# --- search -------------------------------------------------------------------------------------------


def test_search_by_hand_ties_and_missing_terms():
    matrix = sp.csr_matrix(np.array([[1.0, 2.0, 2.0, 2.0, 0.0],
                                     [0.0, 0.5, 0.0, 0.0, 3.0],
                                     [0.0, 0.0, 0.0, 0.0, 0.0]], dtype=np.float32))
    index = ImpactIndex(["a", "b", "c"], ["d3", "d1", "d2", "d0", "d4"], matrix)
    np.testing.assert_array_equal(index.score_all(["a"]), [1.0, 2.0, 2.0, 2.0, 0.0])
    np.testing.assert_array_equal(index.score_all(["a", "b", "a"]), [2.0, 4.5, 4.0, 4.0, 3.0])
    # ties in trec_eval's order: the larger document id first (also at the cut)
    assert index.search(["a"], k=2) == {"d2": 2.0, "d1": 2.0}  # three tie at 2: the larger ids
    assert list(index.search(["a"], k=2)) == ["d2", "d1"]
    assert list(index.search(["a"], k=3)) == ["d2", "d1", "d0"]
    assert list(index.search(["a"], k=4)) == ["d2", "d1", "d0", "d3"]
    assert list(index.search(["a"], k=1)) == ["d2"]
    assert list(index.search(["a"])) == ["d2", "d1", "d0", "d3", "d4"]  # k past N: all, zeros last
    assert list(index.search(["a"], k=5)) == ["d2", "d1", "d0", "d3", "d4"]
    assert index.search(["b", "a", "a"], k=3) == {"d1": 4.5, "d2": 4.0, "d0": 4.0}
    assert list(index.search(["b", "a", "a"], k=3)) == ["d1", "d2", "d0"]
    assert index.search(["b"], k=2) == {"d4": 3.0, "d1": 0.5}
    assert list(index.search(["c"], k=2)) == ["d4", "d3"]  # all zero: the largest ids
    assert all(isinstance(v, float) for v in index.search(["a"]).values())
    with pytest.raises(MissingTermsError, match=r"^2 query terms are not in the index \(x, z\)"):
        index.score_all(["a", "z", "x", "z"])
    with pytest.raises(MissingTermsError, match="--query_tasks"):
        index.search(["q"])
    with pytest.raises(ValueError, match="does not match"):
        ImpactIndex(["a"], ["d0", "d1"], sp.csr_matrix((2, 2), dtype=np.float32))


def test_search_is_the_top_k_of_score_all(built, corpus):
    _, _, index, _ = built
    featurizer = corpus[3]
    for text in TOPICS.values():
        query = featurizer.query_terms(text)
        scores = index.score_all(query)
        for k in (1, 7, 10, N_DOCS, 100):
            top = sorted(range(N_DOCS), key=lambda i: (scores[i], index.doc_ids[i]), reverse=True)[:k]
            result = index.search(query, k)
            assert list(result) == [index.doc_ids[i] for i in top]
            assert list(result.values()) == [float(scores[i]) for i in top]
    with pytest.raises(MissingTermsError, match="banana"):  # q5's 21st term was not indexed
        index.search(["river", "banana"])
    run = index.retrieve(TOPICS, featurizer, k=5)  # full retrieval of every topic
    assert list(run) == sorted(TOPICS)
    assert run == {q: index.search(featurizer.query_terms(t), 5) for q, t in TOPICS.items()}
    assert all(len(docs) == 5 for docs in run.values())


# --- which terms --------------------------------------------------------------------------------------


def test_index_terms(corpus):
    _, _, resources, featurizer, terms, _ = corpus
    expected = {"river", "mountain", "salmon", "coffee", "garden", "tiger", "zebra", "eagle", "quasar",
                *WORDS[8:28]}  # q5: WORDS[27] down to WORDS[8] are its first 20 terms
    assert terms == sorted(expected) and len(terms) == 24
    assert WORDS[4:8] == ["banana", "garden", "ocean", "island"] and WORDS[28:] == ["harbor", "lantern"]
    assert not {"forest", "apple", "banana", "ocean", "island", "harbor", "lantern"} & set(terms)
    assert index_terms([TOPICS], featurizer) == terms
    assert index_terms([{"a": "tiger"}, {"b": "Zebra tiger", "c": "of the"}], featurizer) == ["tiger", "zebra"]
    assert index_terms([], featurizer) == []
    with_vocabulary = index_terms([{"x": "quasar"}], featurizer, vocabulary=True)
    assert with_vocabulary == sorted({"quasar", *resources.terms[3:]})
    assert not {"UNK", "<S>", "</S>"} & set(with_vocabulary)
    assert set(resources.terms[3:]) == set(WORDS) | {"http", "org"}  # min_count 1: every word (+ the URL's)


def test_fewer_terms_than_a_padded_query(corpus, tmp_path):
    """The featuriser pads the pseudo-query to 20 terms; the index keeps only the real ones."""
    docs, lookup, resources, featurizer, _, order = corpus
    model = ConformerKernelRanker(model="ndrm2", vocab_size=len(resources)).eval()
    model.use_resources(resources)
    index = build_index(model, featurizer, lookup, order, ["tiger", "zebra"], tmp_path / "idx", shard_size=SHARD,
                        trainer_options=TRAINER)
    assert index.matrix.shape == (2, N_DOCS)
    assert index.search(["tiger"], k=0) == {}


# --- the command line ---------------------------------------------------------------------------------


def _checkpoint(model: ConformerKernelRanker, resources: Resources, path) -> None:
    """What Lightning's ModelCheckpoint writes, as far as load_from_checkpoint and load_for_inference read it."""
    torch.save({"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams),
                "pytorch-lightning_version": lightning.__version__, "resources": resources.state(),
                "datamodule_hyper_parameters": {"max_query_terms": 20, "max_doc_terms": 200,
                                                "max_orcas_terms": 2000, "orcas": None}}, path)


@pytest.mark.parametrize("built", ["ndrm3"], indirect=True)  # embeddings, BatchScale and BatchNorm in the checkpoint
def test_command_line(built, corpus, tmp_path, monkeypatch, capsys):
    kind, model, index, _ = built
    docs, _, resources, featurizer, terms, _ = corpus
    monkeypatch.setenv("EFFICIENT_RANKERS_CACHE", str(tmp_path / "cache"))
    checkpoint = tmp_path / "model.ckpt"
    _checkpoint(model, resources, checkpoint)
    loaded, loaded_featurizer = load_for_inference(str(checkpoint))
    assert not loaded.training and loaded.resources.terms == resources.terms
    assert loaded.resources.idf == resources.idf and loaded_featurizer.max_doc_terms == 200
    for name, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], value), name

    topics_path, collection_path = tmp_path / "topics.tsv", tmp_path / "docs.jsonl"
    write_topics(topics_path, TOPICS)
    write_collection(collection_path, docs[::-1])
    sources = {"mine:topics": FileSource(topics_path),
               "mine:collection": FileSource(topics_path, collection_path=collection_path)}
    monkeypatch.setattr(index_module, "source_from_spec", lambda spec: sources[spec])
    monkeypatch.setattr(index_module, "check_spec", lambda spec, option: None)  # mine:... names no real task
    output = tmp_path / "cli-index"
    result = main(["--checkpoint", str(checkpoint), "--collection", "mine:collection", "--query_tasks", "mine:topics",
                   "--output_dir", str(output), "--shard_size", "16", "--batch_size", "5", "--term_chunk", "8",
                   "--accelerator", "cpu", "--devices", "1"])
    out = capsys.readouterr().out
    assert f"indexing {len(terms)} terms x {N_DOCS} documents" in out and f"written: {output}" in out
    assert sorted(p.name for p in output.iterdir()) == sorted(INDEX_FILES)
    cli = ImpactIndex.load(output)
    assert cli.terms == terms and cli.doc_ids == [d.doc_id for d in docs[::-1]]  # collection order
    assert cli.meta["shard_size"] == 16 and cli.meta["model"] == "ndrm3"
    assert (result.matrix != cli.matrix).nnz == 0
    columns = [index.doc_ids.index(d) for d in cli.doc_ids]
    np.testing.assert_allclose(cli.matrix.toarray(), index.matrix.toarray()[:, columns], rtol=1e-5, atol=1e-6)

    # --vocabulary adds every model term ('http' and the words no query has)
    vocab_output = tmp_path / "vocab-index"
    main(["--checkpoint", str(checkpoint), "--collection", "mine:collection", "--vocabulary", "--output_dir",
          str(vocab_output), "--shard_size", "40", "--accelerator", "cpu", "--devices", "1"])
    assert ImpactIndex.load(vocab_output).terms == sorted(resources.terms[3:])

    # an existing output is refused in one line, before the checkpoint is read
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(["--checkpoint", str(checkpoint), "--collection", "mine:collection", "--query_tasks", "mine:topics",
              "--output_dir", str(output), "--accelerator", "cpu", "--devices", "1"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == f"error: --output_dir: {output} already holds an index; choose a new folder\n"


def test_command_line_help_and_nothing_to_index(capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert "impact index" in text and "--resume" in text and "--vocabulary" in text and "--shard_size" in text
    checkpoint = tmp_path / "any.ckpt"
    torch.save({}, checkpoint)
    with pytest.raises(SystemExit) as exit_info:  # checked before the checkpoint is read
        main(["--checkpoint", str(checkpoint), "--collection", "builtin:test", "--output_dir", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == "error: nothing to index: give --query_tasks TASK [TASK ...] and/or --vocabulary\n"
    assert not (tmp_path / "out").exists()
    with pytest.raises(SystemExit) as exit_info:  # --checkpoint, --collection and --output_dir are required
        main(["--query_tasks", "builtin:test"])
    assert exit_info.value.code == 2
    assert "required" in capsys.readouterr().err


# --- precision and loader workers ----------------------------------------------------------------------------


@pytest.mark.parametrize("built", ["ndrm3"], indirect=True)  # the loader does not depend on the model
def test_loader_workers_build_the_same_index(built, corpus, tmp_path):
    """Two loader workers read and featurise the shards (`impact_index.DocumentShards`); the index is the one the
    main process built, array for array."""
    _, model, index, _ = built
    _, lookup, _, featurizer, terms, order = corpus
    again = build_index(model, featurizer, lookup, order, terms, tmp_path / "workers", shard_size=SHARD,
                        batch_size=BATCH, term_chunk=CHUNK, trainer_options=TRAINER, num_workers=2)
    for mine, reference in zip((again.matrix.data, again.matrix.indices, again.matrix.indptr),
                               (index.matrix.data, index.matrix.indices, index.matrix.indptr)):
        np.testing.assert_array_equal(mine, reference)


@pytest.mark.parametrize("built", ["ndrm1", "ndrm3"], indirect=True)  # the two with a conformer encoder
def test_a_bf16_mixed_index_is_near_the_fp32_one(built, corpus, tmp_path):
    """``precision="bf16-mixed"`` (``conformer_kernel.index --precision``): every s_td within 6% of the fp32 index's
    largest |s_td| (bfloat16's 8 significant bits through a conformer layer and the kernel pooling: 1.7% at most on
    a Zen 4), yet not the same; stored as float32."""
    _, model, index, _ = built
    _, lookup, _, featurizer, terms, order = corpus
    bf16 = build_index(model, featurizer, lookup, order, terms, tmp_path / "bf16", shard_size=SHARD,
                       batch_size=BATCH, term_chunk=CHUNK, trainer_options={**TRAINER, "precision": "bf16-mixed"})
    mine, reference = bf16.matrix.toarray(), index.matrix.toarray()
    assert bf16.matrix.dtype == np.float32
    difference = np.abs(mine - reference).max()
    assert 0 < difference < 0.06 * np.abs(reference).max()
