"""`conformer_kernel.portable` through `common.api.load`: a `conformer_kernel.train` checkpoint or its exported folder
scores as `conformer_kernel.evaluate` does, without Lightning, the training files or the cache; documents are
featurised by their content, never by their id alone; the ORCAS field comes with an `OrcasDocument`.

The checkpoint is a tiny NDRM3 (hidden size 32, one layer) whose vocabulary, IDFs and word2vec embeddings come from a
training task in files (600 documents of the built-in collection), with BatchScale's and BatchNorm's running
statistics moved off their initial values by a few batches in training mode, so that scoring in eval mode is seen."""

import copy
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import lightning as L
import numpy as np
import pandas as pd
import pytest
import torch

import common.api
from common.api import load
from common.data.builtin import builtin_source
from common.data.formats import Document, read_run
from common.metrics.ordering import ranked
from common.portable import KEY, PortableError
from conformer_kernel import evaluate, hidden_size, portable
from conformer_kernel.data import ConformerKernelDataModule
from conformer_kernel.features import OrcasDocument, encode_pairs
from conformer_kernel.ranker import ConformerKernelRanker
from tests.conformer_kernel import featurizer_of

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

FIXTURES = Path(__file__).parents[1] / "fixtures" / "checkpoints"
#: Documents of the training task's collection (the vocabulary's, IDFs' and embeddings' corpus).
TRAIN_DOCUMENTS = 600
#: Test queries evaluated, each with its 100 candidates (all re-ranked: the run holds no unscored candidate).
QUERIES = 2
TOLERANCE = dict(rtol=1e-6, atol=1e-6)


def training_files(folder: Path) -> dict:
    """A training task in files: the built-in training task cut to its first `TRAIN_DOCUMENTS` documents."""
    source = builtin_source("train")
    folder.mkdir()
    lines = source.collection_path.read_text().splitlines()[:TRAIN_DOCUMENTS]
    kept = {json.loads(line)["doc_id"] for line in lines}
    (folder / "collection.jsonl").write_text("".join(f"{line}\n" for line in lines))
    for name, path in (("qrels.txt", source.qrels_path), ("run.trec", source.candidates_path)):
        rows = [line for line in path.read_text().splitlines() if line.split()[2] in kept]
        (folder / name).write_text("".join(f"{line}\n" for line in rows))
    shutil.copy(source.topics_path, folder / "topics.tsv")
    return {"topics_path": str(folder / "topics.tsv"), "qrels_path": str(folder / "qrels.txt"),
            "candidates_path": str(folder / "run.trec"), "collection_path": str(folder / "collection.jsonl"),
            "name": "train-600"}


def candidate_pairs(n: int = 8) -> tuple[list[str], list[Document]]:
    """`n` (query, document) pairs of the built-in test task: one query's top candidates."""
    source = builtin_source("test")
    qid = sorted(source.candidates())[0]
    doc_ids = [doc_id for doc_id, _ in ranked(source.candidates()[qid])[:n]]
    return [source.topics()[qid]] * n, source.documents().get_many(doc_ids)


def make_ranker(data: ConformerKernelDataModule, **options) -> ConformerKernelRanker:
    """A tiny ranker with the data module's embeddings, its BatchScale and BatchNorm statistics those of two
    training-mode batches, in eval mode."""
    torch.manual_seed(0)
    model = ConformerKernelRanker(vocab_size=data.vocab_size, hidden_size=hidden_size(16), num_heads=4, num_layers=1,
                                  identity_init=True, **options)
    model.use_resources(data.resources)
    queries, documents = candidate_pairs()
    model.train()
    with torch.no_grad():
        for half in (slice(0, 4), slice(4, 8)):
            model(encode_pairs(data.featurizer, queries[half], documents[half])["features"])
    return model.eval()


def save(model: ConformerKernelRanker, data: ConformerKernelDataModule, path: Path, **data_settings) -> Path:
    """`model` saved as a trainer saves it (`on_save_checkpoint` with the data module's settings)."""
    state = {"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams),
             "pytorch-lightning_version": L.__version__,
             "datamodule_hyper_parameters": dict(data.hparams) | data_settings}
    model.on_save_checkpoint(state)
    torch.save(state, path)
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(checkpoint, its data module, its ranker, the training task's folder)."""
    folder = tmp_path_factory.mktemp("ck-portable")
    data = ConformerKernelDataModule(train=training_files(folder / "train"), dev=None, test=None, min_count=2,
                                     embedding_dim=16, depth=100)
    model = make_ranker(data)
    return save(model, data, folder / "best.ckpt"), data, model, folder / "train"


@pytest.fixture(scope="module")
def evaluated(trained, tmp_path_factory):
    """The scores `conformer_kernel.evaluate` writes for the checkpoint: {(query text, document): score}."""
    out = tmp_path_factory.mktemp("ck-evaluate") / "eval"
    evaluate.main(["--checkpoint", str(trained[0]), "--task", "builtin:test", "--modes", "rerank", "--test_queries",
                   str(QUERIES), "--output_dir", str(out), "--devices", "1"])
    run = read_run(out / "run.rerank.trec")  # every score as Python's repr of the float32 score: exact
    source = builtin_source("test")
    assert len(run) == QUERIES and all(len(scores) == 100 for scores in run.values())
    pairs = [(qid, doc_id) for qid, scores in run.items() for doc_id in scores]
    documents = source.documents().get_many([doc_id for _, doc_id in pairs])
    return [source.topics()[qid] for qid, _ in pairs], documents, np.array([run[q][d] for q, d in pairs])


@pytest.fixture
def packages_here(monkeypatch):
    """`common.api.load` tries, on a checkpoint without an entry, the packages whose ``portable`` module is here
    (each recognises only its own checkpoints: `test_only_conformer_kernel_checkpoints_are_recognised`)."""
    present = tuple(p for p in common.api.PACKAGES if importlib.util.find_spec(f"{p}.portable") is not None)
    monkeypatch.setattr(common.api, "PACKAGES", present)


# --- scores ---------------------------------------------------------------------------------------------------


def test_a_checkpoint_scores_as_evaluate_writes(trained, evaluated):
    queries, documents, expected = evaluated
    ranker = load(trained[0], batch_size=16)
    np.testing.assert_allclose(ranker.score_pairs(queries, documents), expected, **TOLERANCE)
    first = [i for i, q in enumerate(queries) if q == queries[0]]
    np.testing.assert_allclose(ranker.score(queries[0], [documents[i] for i in first]), expected[first], **TOLERANCE)


def test_the_scores_are_in_eval_mode_with_the_running_statistics(trained):
    """BatchScale (NDRM2) and BatchNorm (NDRM3) divide and normalise by their running statistics, which the fixture
    moved off their initial values, not by the batch's (which training mode would use)."""
    model = trained[2].model
    assert model.ndrm2.scale_tf.running_mean.item() > 0 and model.norm.running_mean.abs().min().item() > 0
    queries, documents = candidate_pairs()
    batch = encode_pairs(trained[1].featurizer, queries, documents)["features"]
    scores = load(trained[0]).score_pairs(queries, documents)
    with torch.no_grad():
        np.testing.assert_allclose(scores, model(batch)[:, 0].numpy(), **TOLERANCE)
        batch_statistics = copy.deepcopy(model)
        batch_statistics.norm.train(), batch_statistics.ndrm2.train()  # the rest (dropout) in eval mode
        assert not np.allclose(scores, batch_statistics(batch)[:, 0].numpy(), rtol=1e-3)


@pytest.mark.parametrize("options", [{"model": "ndrm1"}, {"model": "ndrm2"}, {"model": "ndrm3", "encoder":
                                     "transformer"}, {"model": "ndrm3", "doc_padding": "zeroed"}], ids=str)
def test_each_model_scores_as_its_ranker(trained, tmp_path, options):
    data = trained[1]
    model = make_ranker(data, **options)
    queries, documents = candidate_pairs()
    expected = model.evaluation_scores(encode_pairs(data.featurizer, queries, documents)).detach().numpy()
    ranker = load(save(model, data, tmp_path / "best.ckpt"))
    np.testing.assert_allclose(ranker.score_pairs(queries, documents), expected, **TOLERANCE)


@pytest.mark.usefixtures("packages_here")
def test_a_checkpoint_saved_outside_a_trainer_scores_with_evaluates_defaults(trained, tmp_path):
    """No data module's settings, so no entry: `load` builds it from the hyper-parameters and the vocabulary."""
    data, model = trained[1], trained[2]
    state = {"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams)}
    model.on_save_checkpoint(state)
    assert KEY not in state
    torch.save(state, tmp_path / "bare.ckpt")
    ranker = load(tmp_path / "bare.ckpt")
    assert ranker.config["inputs"] == {"max_query_terms": 20, "max_doc_terms": 4000, "max_orcas_terms": 2000,
                                       "orcas": False}
    queries, documents = candidate_pairs()
    expected = model.evaluation_scores(encode_pairs(data.featurizer, queries, documents)).detach().numpy()
    np.testing.assert_allclose(ranker.score_pairs(queries, documents), expected, **TOLERANCE)


@pytest.mark.usefixtures("packages_here")
def test_the_fixture_checkpoint_scores_as_its_evaluate_did():
    """The tiny fixture (no entry) against the run its evaluate wrote (tests/fixtures/checkpoints/README.md; scores
    to 1e-5: another CPU's sums)."""
    assert KEY not in torch.load(FIXTURES / "conformer_kernel.ckpt", weights_only=True)
    expected = read_run(FIXTURES / "expected" / "conformer_kernel" / "run.rerank.trec")
    source = builtin_source("test")
    ranker = load(FIXTURES / "conformer_kernel.ckpt")
    assert ranker.config["model"]["hidden_size"] == 32 and ranker.config["model"]["num_heads"] == 4
    for qid, run in expected.items():
        doc_ids = [doc_id for doc_id, _ in ranked(source.candidates()[qid])[:10]]  # the 10 it re-ranked
        scores = ranker.score(source.topics()[qid], source.documents().get_many(doc_ids))
        np.testing.assert_allclose(scores, [run[d] for d in doc_ids], rtol=0, atol=1e-5)


# --- sharing --------------------------------------------------------------------------------------------------

LOAD_ELSEWHERE = """
import json, sys
import common.api
from common.api import load
from common.data.formats import Document
ranker = load(sys.argv[1])
queries, documents = json.loads(sys.argv[2])
scores = ranker.score_pairs(queries, [Document(*d) for d in documents])
assert not any(m.split(".")[0] in ("lightning", "lightning_fabric", "torchmetrics") for m in sys.modules), "lightning"
print(json.dumps(scores.tolist()))
"""


def test_an_exported_folder_scores_the_same_in_a_process_without_lightning(trained, tmp_path):
    queries, documents = candidate_pairs()
    ranker = load(trained[0])
    folder = ranker.export(tmp_path / "ck")
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "config.json", "idf.tsv", "model.safetensors",
                                                        "terms.txt"]
    pairs = json.dumps([queries, [[d.doc_id, d.text, d.title, d.url] for d in documents]])
    done = subprocess.run([sys.executable, "-c", LOAD_ELSEWHERE, str(folder), pairs], capture_output=True,
                          text=True, check=True)
    np.testing.assert_allclose(json.loads(done.stdout), ranker.score_pairs(queries, documents), **TOLERANCE)


def test_a_folder_of_another_package_or_format_is_refused_in_one_line(trained, tmp_path):
    folder = load(trained[0]).export(tmp_path / "ck")
    with pytest.raises(PortableError) as refused:
        load(folder, package="qds")
    assert str(refused.value) == f"{folder} holds a conformer_kernel ranker, not a qds one"
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | {"format": 2}))
    with pytest.raises(PortableError) as refused:
        load(folder)
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"{folder} was written by ") and "in format 2" in message


def test_a_checkpoint_scores_without_its_training_files_and_cache(trained, tmp_path, monkeypatch):
    checkpoint, _, _, train = trained
    queries, documents = candidate_pairs()
    expected = load(checkpoint).score_pairs(queries, documents)
    monkeypatch.setenv("EFFICIENT_RANKERS_CACHE", str(tmp_path / "empty-cache"))
    train.rename(tmp_path / "moved")
    try:
        np.testing.assert_allclose(load(checkpoint).score_pairs(queries, documents), expected, **TOLERANCE)
        assert [p.name for p in (tmp_path / "empty-cache").iterdir()] == ["portable"]  # the vocabulary alone
    finally:
        (tmp_path / "moved").rename(train)


def test_the_entry_carries_the_vocabulary_and_the_featuriser_settings(trained):
    entry = portable.checkpoint_entry(torch.load(trained[0], weights_only=True))
    resources = trained[1].resources
    assert entry["files"]["terms.txt"].decode().splitlines() == resources.terms
    idf = dict(line.split("\t") for line in entry["files"]["idf.tsv"].decode().splitlines())
    assert {t: float(v) for t, v in idf.items()} == resources.idf
    assert entry["config"]["inputs"] == {"max_query_terms": 20, "max_doc_terms": 4000, "max_orcas_terms": 2000,
                                         "orcas": False}
    assert entry["config"]["model"]["vocab_size"] == len(resources) and "lr" not in entry["config"]["model"]


def test_only_conformer_kernel_checkpoints_are_recognised():
    found = {name: portable.recognises(torch.load(FIXTURES / f"{name}.ckpt", weights_only=True))
             for name in ("conformer_kernel", "qds", "earl", "mva", "mva-de", "mva-ca")}
    assert found == {"conformer_kernel": True, "qds": False, "earl": False, "mva": False, "mva-de": False,
                     "mva-ca": False}


# --- documents ------------------------------------------------------------------------------------------------


def test_rerank_sorts_each_query_by_the_pairs_scores(trained):
    ranker = load(trained[0])
    queries, documents = candidate_pairs(6)
    frame = pd.DataFrame({"qid": ["b", "b", "b", "a", "a", "a"],
                          "query": [queries[0]] * 3 + ["the market near the river"] * 3,
                          "docno": [d.doc_id for d in documents], "text": [d.text for d in documents],
                          "title": [d.title for d in documents]})
    scores = ranker.score_pairs(frame["query"].tolist(), documents)
    out = ranker.rerank(frame)
    assert out["qid"].tolist() == ["a"] * 3 + ["b"] * 3 and out["rank"].tolist() == [0, 1, 2] * 2
    for qid, rows in (("a", [3, 4, 5]), ("b", [0, 1, 2])):
        order = sorted(rows, key=lambda i: -scores[i])
        got = out[out["qid"] == qid]
        assert got["docno"].tolist() == [documents[i].doc_id for i in order]
        np.testing.assert_allclose(got["score"], scores[order], **TOLERANCE)


def test_a_documents_url_is_read_from_a_mapping_and_a_frame(trained):
    """The url is a field of the document's terms (`conformer_kernel.text.document_terms`)."""
    ranker = load(trained[0])
    queries, documents = candidate_pairs(2)
    url = "http://market.example/river-tower"
    expected = ranker.score(queries[0], [Document(d.doc_id, d.text, d.title, url) for d in documents])
    assert not np.allclose(expected, ranker.score(queries[0], documents), rtol=1e-4)  # the url's terms count
    mappings = [{"docno": d.doc_id, "text": d.text, "title": d.title, "url": url} for d in documents]
    np.testing.assert_allclose(ranker.score(queries[0], mappings), expected, **TOLERANCE)
    frame = pd.DataFrame([{"qid": "q", "query": queries[0], **m} for m in mappings])
    out = ranker.rerank(frame).set_index("docno")
    np.testing.assert_allclose(out.loc[[d.doc_id for d in documents], "score"], expected, **TOLERANCE)


def test_two_documents_of_one_id_are_featurised_by_their_own_text(trained):
    """The featuriser's cache is keyed by content: a document of an id seen before with another text (or a bare
    text, whose id is "") scores as it does in a fresh ranker."""
    (query, _), (first, second) = candidate_pairs(2)
    other = Document(first.doc_id, second.text, second.title)  # the first's id, the second's text
    fresh = load(trained[0]).score(query, [other, second.text])
    ranker = load(trained[0])
    seen = ranker.score(query, [first, first.text])
    assert np.abs(seen - fresh).min() > 1e-4  # the two texts score apart
    np.testing.assert_allclose(ranker.score(query, [other, second.text]), fresh, **TOLERANCE)


# --- ORCAS ----------------------------------------------------------------------------------------------------

CLICKS = "market tower history of the old river"


def test_an_orcas_model_reads_the_field_of_an_orcas_document(trained, tmp_path):
    """As evaluate's featuriser reads it from the ORCAS data by id (a mapping here), with the same scores."""
    data, model = trained[1], trained[2]
    checkpoint = save(model, data, tmp_path / "orcas.ckpt", orcas="irds:msmarco-document/orcas")
    queries, documents = candidate_pairs(4)
    field = {documents[0].doc_id: CLICKS, documents[2].doc_id: CLICKS}
    official = featurizer_of(data.resources, orcas=field)  # evaluate's, with ORCAS data naming two documents
    expected = model.evaluation_scores(encode_pairs(official, queries, documents)).detach().numpy()
    given = [OrcasDocument(d.doc_id, d.text, d.title, d.url, field.get(d.doc_id, "")) for d in documents]
    ranker = load(checkpoint)
    assert ranker.config["inputs"]["orcas"] is True
    np.testing.assert_allclose(ranker.score_pairs(queries, given), expected, **TOLERANCE)
    unclicked = model.evaluation_scores(encode_pairs(featurizer_of(data.resources, orcas={}), queries, documents))
    np.testing.assert_allclose(ranker.score_pairs(queries, documents), unclicked.detach().numpy(), **TOLERANCE)
    assert abs(expected[0] - unclicked[0].item()) > 1e-4  # the clicks count


def test_a_model_without_orcas_ignores_an_orcas_documents_field(trained):
    queries, documents = candidate_pairs(2)
    ranker = load(trained[0])
    given = [OrcasDocument(d.doc_id, d.text, d.title, d.url, CLICKS) for d in documents]
    np.testing.assert_allclose(ranker.score_pairs(queries, given), ranker.score_pairs(queries, documents),
                               **TOLERANCE)
