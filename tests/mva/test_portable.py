"""`common.api.load` of `mva.train` checkpoints and exported folders (`mva.portable`): MVA (documents as K [CLS]
timesteps; temporal pooling of documents with First-K queries, two heads), the dual encoder (DE: [CLS] dot product;
mean vectors by scaled cosine) and cross-attention (CA) score as ``mva.evaluate`` does, within 1e-6 (relative and
absolute):

- against the run.trec of ``mva.evaluate``, end to end, and from an MVA and a DE store of ``mva.index`` with
  ``load(ckpt, store=DIR)``;
- an exported folder scores the same in a new process that never imports Lightning; a folder of another package or
  format is refused in one line naming it; a checkpoint of a learnt tokenizer (``builtin``, ``train``) scores the
  same with an empty cache and the training files gone; `Ranker.rerank` sorts each query by `score_pairs`' scores;
- `recognises` tells MVA's checkpoints (MVA, DE, CA) from those of the three other packages (the fixtures of
  tests/fixtures/checkpoints), and the old MVA fixtures (weights under ``ranker.``, no ``cls_init``) score their
  expected run.trec;
- two documents under one id, or two bare texts, never share a tokenised passage (`BertInputs`' cache).

The models are tiny (one layer, h = 16) with random weights drawn with a large spread; the task is `builtin:test`, 2
queries at depth 5, on the CPU with one thread.
"""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import common.api
from common.api import load
from common.data.builtin import builtin_source
from common.data.docstore import DocumentStore
from common.data.formats import Document, write_collection
from common.encoders.bert_inputs import BertInputs
from common.portable import KEY, PortableError
from mva import evaluate, index, portable
from mva.data import MVADataModule
from mva.ranker import MVARanker
from tests.bert_portable_checks import (assert_cache_keyed_by_content, assert_close, pair_texts, run_scores,
                                        save_as_trainer, scores_in_fresh_process, spread_weights)

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = {"num_layers": 1, "hidden_size": 16, "num_heads": 2, "intermediate_size": 32, "projection": 8}
#: Each model's settings beside TINY.
MODELS = {"mva_cls": {"architecture": "mva", "doc_pooling": "cls", "doc_timesteps": 3},
          "mva_temporal": {"architecture": "mva", "query_pooling": "first_k", "query_timesteps": 4,
                           "doc_pooling": "temporal", "doc_factor": 3, "heads": 2},
          "de": {"architecture": "de"},
          "de_mean_cosine": {"architecture": "de", "de_pooling": "mean", "de_cosine_scale": 20.0},
          "ca": {"architecture": "ca"}}
QUERIES, DEPTH = 2, 5
DATA = {"train": "builtin:train", "dev": None, "test": "builtin:test", "tokenizer": "builtin", "tokenizer_task": None,
        "query_length": 12, "passage_length": 40, "depth": DEPTH, "test_queries": QUERIES, "relevance_level": 1,
        "seed": 0}
FIXTURES = Path(__file__).parents[1] / "fixtures" / "checkpoints"


def make_ranker(name: str, seed: int = 0, **settings) -> MVARanker:
    torch.manual_seed(seed)
    return spread_weights(MVARanker(**(TINY | MODELS[name] | settings)), seed).eval()


def data_of(name: str, **settings) -> dict:
    return DATA | {"architecture": MODELS[name]["architecture"]} | settings


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, one_thread) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("mva_portable")
    return {name: save_as_trainer(make_ranker(name), data_of(name), root / f"{name}.ckpt") for name in MODELS}


def evaluated_pairs() -> list[tuple[str, str]]:
    """The (qid, docid) pairs ``mva.evaluate`` re-ranks (its data module's)."""
    return MVADataModule(train=None, dev=None, test="builtin:test", depth=DEPTH, test_queries=QUERIES).eval_pairs(
        "test")


def run_evaluate(checkpoint: Path, output: Path, *extra: str) -> dict[tuple[str, str], float]:
    """``mva.evaluate``'s scores of the re-ranked pairs (its run.trec holds the other candidates below them)."""
    evaluate.main(["--checkpoint", str(checkpoint), "--task", "builtin:test", "--test_queries", str(QUERIES),
                   "--depth", str(DEPTH), "--accelerator", "cpu", "--output_dir", str(output), *extra])
    run = run_scores(output)
    return {pair: run[pair] for pair in evaluated_pairs()}


@pytest.fixture(scope="module")
def evaluated(checkpoints, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("mva_evaluated")
    return {name: run_evaluate(path, root / name) for name, path in checkpoints.items()}


@pytest.mark.parametrize("name", list(MODELS))
def test_load_scores_as_evaluate(checkpoints, evaluated, name):
    expected = evaluated[name]
    pairs = sorted(expected)
    assert len(pairs) == QUERIES * DEPTH
    queries, documents = pair_texts("builtin:test", pairs)
    ranker = load(checkpoints[name], batch_size=3)
    assert_close(ranker.score_pairs(queries, documents), [expected[p] for p in pairs])
    first = [i for i, (qid, _) in enumerate(pairs) if qid == pairs[0][0]]
    assert_close(ranker.score(queries[0], [documents[i] for i in first]), [expected[pairs[i]] for i in first])


def test_the_checkpoint_carries_the_entry_a_trainer_saves(checkpoints):
    entry = torch.load(checkpoints["mva_temporal"], weights_only=True)[KEY]
    assert entry["package"] == "mva"
    assert {k: entry["config"][k] for k in ("architecture", "doc_pooling", "doc_factor", "heads")} == {
        "architecture": "mva", "doc_pooling": "temporal", "doc_factor": 3, "heads": 2}
    assert entry["config"]["inputs"] == {"pairs": False, "query_length": 12, "passage_length": 40,
                                         "tokenizer": "builtin"}
    assert entry["config"]["cls_token_id"] == 0  # the built-in BPE's <s>
    assert entry["config"]["encoder"]["hidden_size"] == 16 and "tokenizer.json" in entry["files"]
    assert sum(map(len, entry["files"].values())) < 4 * 2**20
    assert torch.load(checkpoints["ca"], weights_only=True)[KEY]["config"]["inputs"]["pairs"] is True


# --- stores -----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stores(checkpoints, tmp_path_factory):
    """Stores of MVA (K [CLS] timesteps) and DE over the evaluated pairs' documents, and ``mva.evaluate --store``'s
    scores from each; the collection file's cached document store is removed afterwards."""
    root = tmp_path_factory.mktemp("mva_stores")
    subset = root / "subset.jsonl"
    write_collection(subset, pair_texts("builtin:test", sorted(evaluated_pairs()))[1])
    built = {}
    for name in ("mva_cls", "de"):
        index.main(["--checkpoint", str(checkpoints[name]), "--collection", str(subset), "--output_dir", str(root / name),
                    "--shard_size", "4", "--batch_size", "3", "--accelerator", "cpu", "--devices", "1"])
        built[name] = (root / name, run_evaluate(checkpoints[name], root / f"evaluated_{name}", "--store",
                                                 str(root / name)))
    yield built
    DocumentStore.for_collection(subset).path.unlink()


@pytest.mark.parametrize("name", ["mva_cls", "de"])
def test_load_with_a_store_scores_as_evaluate_with_it(checkpoints, stores, name):
    folder, expected = stores[name]
    pairs = sorted(expected)
    queries = pair_texts("builtin:test", pairs)[0]
    ranker = load(checkpoints[name], store=folder, batch_size=4)
    assert_close(ranker.score_pairs(queries, [doc_id for _, doc_id in pairs]), [expected[p] for p in pairs])


def test_a_store_the_model_cannot_read_is_refused(checkpoints, stores):
    with pytest.raises(PortableError, match="stores nothing"):
        load(checkpoints["ca"], store=stores["de"][0])
    with pytest.raises(PortableError, match="strategy de, not mva") as refused:
        load(checkpoints["mva_cls"], store=stores["de"][0])
    assert "\n" not in str(refused.value)


# --- exported folders -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def exported(checkpoints, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("mva_exported") / "mva-temporal"
    return load(checkpoints["mva_temporal"]).export(folder)


def test_an_export_scores_the_same_in_a_process_without_lightning(checkpoints, evaluated, exported, stores, tmp_path):
    """MVA's export (temporal pooling) from texts, and MVA's (K [CLS] timesteps) from its store, in one process."""
    pairs = sorted(evaluated["mva_temporal"])
    queries, documents = pair_texts("builtin:test", pairs)
    with_store = load(checkpoints["mva_cls"]).export(tmp_path / "mva-cls")
    store, from_store = stores["mva_cls"]
    stored_pairs = sorted(from_store)
    got, got_stored = scores_in_fresh_process(
        (exported, None, queries, documents),
        (with_store, store, pair_texts("builtin:test", stored_pairs)[0], [doc_id for _, doc_id in stored_pairs]))
    assert_close(got, [evaluated["mva_temporal"][p] for p in pairs])
    assert_close(got_stored, [from_store[p] for p in stored_pairs])
    assert {p.name for p in exported.iterdir()} >= {"config.json", "model.safetensors", "README.md", "tokenizer.json"}


def test_a_folder_of_another_package_or_format_is_refused_in_one_line(exported, tmp_path):
    with pytest.raises(PortableError) as refused:
        load(exported, package="earl")
    assert str(exported) in str(refused.value) and "\n" not in str(refused.value)
    changed = tmp_path / "changed"
    shutil.copytree(exported, changed)
    config = json.loads((changed / "config.json").read_text())
    (changed / "config.json").write_text(json.dumps({**config, "format": 2}))
    with pytest.raises(PortableError) as refused:
        load(changed)
    assert str(changed) in str(refused.value) and "format 2" in str(refused.value)
    assert "\n" not in str(refused.value)


def test_rerank_sorts_each_query_by_its_scores(exported):
    import pandas as pd

    frame = pd.DataFrame({"qid": ["1", "1", "1", "2", "2"], "query": ["fleas"] * 3 + ["market prices"] * 2,
                          "docno": ["a", "b", "c", "a", "d"],
                          "text": ["fleas feed on blood", "a flea market", "cats and dogs", "fleas feed on blood",
                                   "prices at the market"]})
    ranker = load(exported)
    expected = ranker.score_pairs(frame["query"].tolist(), frame["text"].tolist())
    ranked = ranker.rerank(frame)
    by_pair = {(q, d): s for q, d, s in zip(frame["qid"], frame["docno"], expected)}
    assert [by_pair[q, d] for q, d in zip(ranked["qid"], ranked["docno"])] == pytest.approx(ranked["score"].tolist())
    for _, rows in ranked.groupby("qid"):
        assert rows["rank"].tolist() == list(range(len(rows)))
        assert rows["score"].is_monotonic_decreasing


# --- learnt tokenizers on another machine -----------------------------------------------------------------------


def test_a_builtin_tokenizer_travels_in_the_checkpoint(checkpoints, evaluated, tmp_path, monkeypatch):
    pairs = sorted(evaluated["de"])
    queries, documents = pair_texts("builtin:test", pairs)  # read before the cache moves
    monkeypatch.setenv("EFFICIENT_RANKERS_CACHE", str(tmp_path / "empty"))
    assert_close(load(checkpoints["de"]).score_pairs(queries, documents), [evaluated["de"][p] for p in pairs])
    assert not (tmp_path / "empty" / "tokenizers").exists()  # nothing learnt again


def test_a_tokenizer_learnt_on_the_training_files_travels_in_the_checkpoint(tmp_path, monkeypatch):
    source = builtin_source("train")
    task_dir = tmp_path / "task"
    task_dir.mkdir()
    topics = dict(list(source.topics().items())[:50])
    (task_dir / "topics.tsv").write_text("".join(f"{qid}\t{text}\n" for qid, text in topics.items()))
    write_collection(task_dir / "docs.jsonl", list(source.documents().documents())[:300])
    task = {"topics_path": str(task_dir / "topics.tsv"), "collection_path": str(task_dir / "docs.jsonl")}
    monkeypatch.setenv("EFFICIENT_RANKERS_CACHE", str(tmp_path / "trained_here"))
    ranker = make_ranker("mva_cls", tokenizer="train", tokenizer_task=task)
    path = save_as_trainer(ranker, data_of("mva_cls", tokenizer="train", tokenizer_task=task), tmp_path / "t.ckpt")
    documents = [Document("x", "fleas feed on the blood of mammals"), Document("y", "a market of old things"),
                 Document("z", "the cat sleeps")]
    queries = ["what do fleas eat"] * 3
    here = load(path).score_pairs(queries, documents)
    shutil.rmtree(task_dir)
    monkeypatch.setenv("EFFICIENT_RANKERS_CACHE", str(tmp_path / "elsewhere"))
    assert_close(load(path).score_pairs(queries, documents), here)
    # and the ranker itself, its model over the tokenizer it learnt, scored those pairs so
    learnt = next((tmp_path / "trained_here" / "tokenizers").iterdir())
    with torch.no_grad():
        assert_close(ranker.model(BertInputs(False, str(learnt), 12, 40)(queries, documents)).numpy(), here)


# --- which package ----------------------------------------------------------------------------------------------


def test_recognises_mva_checkpoints_only():
    found = {path.stem: portable.recognises(torch.load(path, weights_only=True, map_location="cpu"))
             for path in sorted(FIXTURES.glob("*.ckpt"))}
    assert found == {"conformer_kernel": False, "earl": False, "mva": True, "mva-ca": True, "mva-de": True,
                     "qds": False}


@pytest.mark.parametrize("name", ["mva", "mva-de", "mva-ca"])
def test_a_fixture_checkpoint_scores_its_expected_run(monkeypatch, name):
    """The MVA fixtures (no entry: rebuilt from their hyper-parameters) against the run ``mva.evaluate`` wrote when
    they were made, within 1e-5 (another CPU's sums)."""
    monkeypatch.setattr(common.api, "PACKAGES", ("earl", "mva"))  # the packages of these tests
    expected = run_scores(FIXTURES / "expected" / name)
    data = MVADataModule(train=None, dev=None, test="builtin:test", depth=10, test_queries=10, passage_length=48)
    pairs = data.eval_pairs("test")  # the re-ranked ones; the run holds the unscored candidates below them too
    assert len(pairs) == 100
    queries, documents = pair_texts("builtin:test", pairs)
    got = load(FIXTURES / f"{name}.ckpt").score_pairs(queries, documents)
    np.testing.assert_allclose(got, [expected[p] for p in pairs], rtol=0, atol=1e-5)


# --- the passages' cache ----------------------------------------------------------------------------------------


def test_passages_are_cached_by_content_not_by_id(exported):
    assert_cache_keyed_by_content(lambda: load(exported))


def test_the_model_keys_are_the_models_arguments_and_ranker_settings():
    """`MVA_KEYS` are `mva.model.MVA`'s settings and `DE_KEYS` `MVARanker`'s DE settings, each an `MVARanker`
    argument (``mva.pretrain`` parses them with its parser)."""
    import inspect

    from mva import portable
    from mva.model import MVA
    from mva.ranker import MVARanker

    assert list(portable.MVA_KEYS) == list(inspect.signature(MVA).parameters)[2:]
    ranker = inspect.signature(MVARanker).parameters
    assert set(portable.MODEL_KEYS) <= set(ranker) and {"de_pooling", "de_cosine_scale"} == set(portable.DE_KEYS)
