"""`python -m mva.train` end to end on the built-in collection with a tiny model, and the DE and CA baselines
trained beside it. (The embedded default against BM25: `test_mva_default`.)"""

import json

import pytest
import torch
import yaml

from common.data.builtin import builtin_source
from common.data.formats import read_run
from common.metrics import evaluate_run
from mva import train
from mva.ranker import MEASURES, MVARanker

TINY = [
    "--model.num_layers", "1", "--model.hidden_size", "32", "--model.num_heads", "2",
    "--model.intermediate_size", "64", "--model.projection", "8", "--model.doc_pooling", "temporal",
    "--model.doc_factor", "2", "--data.passage_length", "48", "--data.depth", "10", "--data.dev_queries", "3",
    "--data.dev_depth", "5", "--data.test_queries", "4", "--data.batch_size", "2", "--data.eval_batch_size", "16",
    "--trainer.max_steps", "6", "--trainer.val_check_interval", "3", "--trainer.enable_progress_bar", "false",
    "--save_every_n_steps", "2", "--compare_with", "[de, ca]",
]  # fmt: skip


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("mva") / "run"
    metrics = train.main([*TINY, "--output_dir", str(out)])
    return out, metrics


def test_training_writes_a_valid_run_and_its_metrics(trained):
    out, metrics = trained
    run = read_run(out / "run.trec")
    assert len(run) == 4  # --data.test_queries
    source = builtin_source("test")
    bm25 = source.candidates()
    for qid, scores in run.items():
        order = sorted(scores, key=scores.get, reverse=True)
        first_stage = sorted(bm25[qid], key=bm25[qid].get, reverse=True)
        assert set(order[:10]) == set(first_stage[:10])  # the top 10 re-ranked, the rest below in BM25 order
        assert order[10:] == first_stage[10:]
    written = json.loads((out / "metrics.json").read_text())
    assert set(written) == {"mva", "bm25", "de", "ca"}
    assert written["mva"] == pytest.approx(evaluate_run(source.qrels(), run, MEASURES))
    assert written == metrics
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["model"]["doc_pooling"] == "temporal" and config["model"]["doc_factor"] == 2


@pytest.mark.parametrize("baseline", ["de", "ca"])
def test_the_baselines_are_trained_the_same_way_beside_it(trained, baseline):
    out, metrics = trained
    folder = out / baseline
    written = json.loads((folder / "metrics.json").read_text())
    assert metrics[baseline] == written[baseline] and written["bm25"] == metrics["bm25"]  # the same test queries
    run = read_run(folder / "run.trec")
    assert written[baseline] == pytest.approx(evaluate_run(builtin_source("test").qrels(), run, MEASURES))
    mine, its = (yaml.safe_load((f / "config.yaml").read_text()) for f in (out, folder))
    assert its["model"]["architecture"] == baseline and its["compare_with"] == []
    assert its["data"] == mine["data"] and its["trainer"] == mine["trainer"]


def test_the_model_is_mva_with_the_configured_pooling(trained):
    """The checkpoint holds MVA's projections of rho h = 64 inputs to p = 8 (temporal pooling, factor 2)."""
    out, _ = trained
    state = torch.load(out / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["state_dict"]
    assert state["ranker.head.doc_key.weight"].shape == (8, 64)
    assert state["ranker.head.query_key.weight"].shape == (8, 32)


def test_init_encoder_takes_a_dual_encoders_encoder(trained):
    """Sec. 3: MVA starts from the DE checkpoint: ``--model.init_encoder`` copies its encoder, nothing else."""
    out, _ = trained
    de = out / "de" / "checkpoints" / "last.ckpt"
    checkpoint = torch.load(de, map_location="cpu", weights_only=True)
    settings = {k: v for k, v in checkpoint["hyper_parameters"].items() if not k.startswith("_")}
    model = MVARanker(**settings | {"architecture": "mva", "projection": 8, "init_encoder": str(de)})
    encoder = {k.removeprefix("ranker.bert."): v for k, v in checkpoint["state_dict"].items()
               if k.startswith("ranker.bert.")}  # fmt: skip
    mine = model.ranker.bert.state_dict()
    assert mine.keys() == encoder.keys() and all(torch.equal(mine[k], v) for k, v in encoder.items())
