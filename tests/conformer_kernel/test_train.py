"""End to end on the built-in collection: training improves the ranking, and train/evaluate/index agree.

Small model (hidden 32, 4 heads), so that the whole file runs in a minute or two on 2 CPU cores;
the paper-size default is measured in results/conformer_kernel/README.md.
"""

import json
import re

import lightning as L
import numpy as np
import pytest
import torch

from common.api import load
from common.data.formats import read_run
from common.portable import KEY
from conformer_kernel import evaluate, hidden_size, train
from conformer_kernel.data import ConformerKernelDataModule
from conformer_kernel.impact_index import ImpactIndex
from conformer_kernel.ranker import ConformerKernelRanker

SMALL = ["--data.embedding_dim", "16", "--model.num_heads", "4", "--model.num_layers", "1", "--data.batch_size", "8"]


pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]  # tests/conftest.py


def test_training_beats_the_initial_ranking():
    L.seed_everything(0)
    data = ConformerKernelDataModule(dev=None, min_count=2, embedding_dim=16, batch_size=8, depth=20, test_queries=40,
                               eval_batch_size=200)
    model = ConformerKernelRanker(vocab_size=data.vocab_size, hidden_size=hidden_size(16), num_heads=4, num_layers=1,
                                  lr=1e-3)
    trainer = L.Trainer(max_steps=60, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu", devices=1)
    before = trainer.test(model, datamodule=data, verbose=False)[0]
    trainer.fit(model, datamodule=data)
    after = trainer.test(model, datamodule=data, verbose=False)[0]
    assert after["test/ndcg_cut_10"] > before["test/ndcg_cut_10"] + 0.05, (before, after)
    assert after["test/map"] > before["test/map"]


def test_train_evaluate_and_index_agree(tmp_path, capsys):
    out = tmp_path / "run"
    metrics = train.main([*SMALL, "--data.min_count", "2", "--data.depth", "10", "--data.dev_queries", "10",
                          "--data.test_queries", "25", "--trainer.max_steps", "4", "--trainer.val_check_interval",
                          "2", "--output_dir", str(out)])
    assert sorted(metrics) == ["bm25", "ndrm3-fullrank", "ndrm3-rerank"]
    assert set(metrics["ndrm3-fullrank"]) == {"ndcg_cut_10", "ncg@100", "map", "recip_rank"}
    assert json.loads((out / "metrics.json").read_text()) == metrics
    for name in ("config.yaml", "run.rerank.trec", "run.fullrank.trec", "index/data.npy", "checkpoints/last.ckpt"):
        assert (out / name).is_file(), name
    best = next((out / "checkpoints").glob("best-*.ckpt"))

    # QTI: the index's s_qd of each re-ranked document equals the model's re-ranking score.
    index = ImpactIndex.load(out / "index")
    model = ConformerKernelRanker.load_from_checkpoint(best, map_location="cpu").eval()
    data = ConformerKernelDataModule(train=None, dev=None, depth=10, test_queries=25)
    from conformer_kernel.impact_index import load_for_inference

    _, featurizer = load_for_inference(str(best))
    data.use_featurizer(featurizer)
    reranked = read_run(out / "run.rerank.trec")
    topics = data.source("test").topics()
    checked = 0
    for qid in data.eval_queries("test"):
        top = dict(sorted(reranked[qid].items(), key=lambda kv: -kv[1])[:10])  # the 10 documents the model scored
        scores = index.score_all(featurizer.query_terms(topics[qid]))
        for doc_id, score in top.items():
            assert scores[index.doc_ids.index(doc_id)] == pytest.approx(score, abs=1e-5)
            checked += 1
        by_model = sorted(top, key=lambda d: -top[d])
        by_index = sorted(top, key=lambda d: -scores[index.doc_ids.index(d)])
        assert by_model == by_index
    assert checked == 250

    # The evaluate command reproduces the training run's test runs from the checkpoint and the index.
    evaluate.main(["--checkpoint", str(best), "--task", "builtin:test", "--depth", "10", "--test_queries", "25",
                   "--index", str(out / "index"), "--output_dir", str(tmp_path / "eval")])
    for mode in ("rerank", "fullrank"):
        trained, evaluated = read_run(out / f"run.{mode}.trec"), read_run(tmp_path / "eval" / f"run.{mode}.trec")
        assert set(trained) == set(evaluated) and len(evaluated) == 25
        for qid, scores in trained.items():
            assert evaluated[qid] == pytest.approx(scores, abs=1e-5)
    assert model.hparams.model == "ndrm3"

    # The trainer's checkpoint carries what common.api.load reads (its vocabulary once, beside the hyper-parameters),
    # which scores as evaluate re-ranked.
    assert "resources" in torch.load(best, weights_only=True) and KEY not in torch.load(best, weights_only=True)
    ranker, documents = load(best), data.source("test").documents()
    for qid, scores in read_run(tmp_path / "eval" / "run.rerank.trec").items():
        top = sorted(scores, key=lambda d: -scores[d])[:10]  # the 10 documents the model scored
        np.testing.assert_allclose(ranker.score(topics[qid], documents.get_many(top)), [scores[d] for d in top],
                                   rtol=1e-6, atol=1e-6)

    # An index built for other queries (the 25 evaluated above) is refused in one line, before anything is written.
    with pytest.raises(SystemExit) as exit:
        evaluate.main(["--checkpoint", str(best), "--task", "builtin:test", "--modes", "fullrank", "--index",
                       str(out / "index"), "--output_dir", str(tmp_path / "all")])  # every test query
    assert exit.value.code == 2 and not (tmp_path / "all").exists()
    assert re.fullmatch(r"error: \d+ query terms? (is|are) not in the index \(.+\); build it with the topics that "
                        r"contain them \(conformer_kernel.index --query_tasks\)", capsys.readouterr().err.splitlines()[-1])


def test_output_folder_is_never_reused(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "x").write_text("taken")
    with pytest.raises(SystemExit) as exit:
        train.main([*SMALL, "--output_dir", str(tmp_path / "run")])
    assert exit.value.code == 2 and "run is not empty" in capsys.readouterr().err.splitlines()[-1]

