"""`python -m mva.train` end to end on the built-in collection with a tiny model, and the DE and CA baselines
trained beside it. (The embedded default against BM25: `test_mva_default`.)"""

import pytest
import torch
import yaml

from mva import train
from mva.ranker import MEASURES, MVARanker
from tests.train_runs import TINY_RUN, check_baseline, check_reranked_run, tiny_run

pytestmark = pytest.mark.slow  # the second tier (README, "Tests")

TINY = [
    "--model.num_layers", "1", "--model.hidden_size", "32", "--model.num_heads", "2",
    "--model.intermediate_size", "64", "--model.projection", "8", "--model.doc_pooling", "temporal",
    "--model.doc_factor", "2", "--data.passage_length", "48", *TINY_RUN, "--compare_with", "[de, ca]",
]


trained = tiny_run(train.main, TINY)


def test_training_writes_a_valid_run_and_its_metrics(trained):
    out, metrics = trained
    written = check_reranked_run(out, metrics, "mva", MEASURES)
    assert set(written) == {"mva", "bm25", "de", "ca"}
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["model"]["doc_pooling"] == "temporal" and config["model"]["doc_factor"] == 2


@pytest.mark.parametrize("baseline", ["de", "ca"])
def test_the_baselines_are_trained_the_same_way_beside_it(trained, baseline):
    check_baseline(*trained, baseline, MEASURES)


def test_the_model_is_mva_with_the_configured_pooling(trained):
    """The checkpoint holds MVA's projections of rho h = 64 inputs to p = 8 (temporal pooling, factor 2)."""
    out, _ = trained
    state = torch.load(out / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["state_dict"]
    assert state["model.head.doc_key.weight"].shape == (8, 64)
    assert state["model.head.query_key.weight"].shape == (8, 32)


def test_init_encoder_takes_a_dual_encoders_encoder(trained):
    """Sec. 3: MVA starts from the DE checkpoint: ``--model.init_encoder`` copies its encoder, nothing else."""
    out, _ = trained
    de = out / "de" / "checkpoints" / "last.ckpt"
    checkpoint = torch.load(de, map_location="cpu", weights_only=True)
    settings = {k: v for k, v in checkpoint["hyper_parameters"].items() if not k.startswith("_")}
    model = MVARanker(**settings | {"architecture": "mva", "projection": 8, "init_encoder": str(de)})
    encoder = {k.removeprefix("model.bert."): v for k, v in checkpoint["state_dict"].items()
               if k.startswith("model.bert.")}
    mine = model.model.bert.state_dict()
    assert mine.keys() == encoder.keys() and all(torch.equal(mine[k], v) for k, v in encoder.items())


def test_the_tested_checkpoint_loads_with_common_api_and_scores_its_run(trained):
    from mva.data import MVADataModule
    from tests.bert_portable_checks import assert_tested_checkpoint_scores_its_run

    assert_tested_checkpoint_scores_its_run(trained[0], MVADataModule, "mva")
