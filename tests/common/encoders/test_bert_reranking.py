"""`common.encoders.bert_reranking`: EARL's and MVA's checkpoints written while the model's attribute was ``ranker``
(the fixtures in tests/fixtures/checkpoints, written by the old code) load into today's ``model`` wherever weights
are read: Lightning's ``load_from_checkpoint``, ``init_checkpoint`` and MVA's ``init_encoder``."""

from pathlib import Path

import pytest
import torch

from earl.ranker import EARLRanker
from mva.ranker import MVARanker

FIXTURES = Path(__file__).parents[2] / "fixtures" / "checkpoints"


def old_checkpoint(name: str) -> tuple[Path, dict]:
    path = FIXTURES / f"{name}.ckpt"
    return path, torch.load(path, map_location="cpu", weights_only=True)


def settings(state: dict) -> dict:
    return {k: v for k, v in state["hyper_parameters"].items() if not k.startswith("_")}


@pytest.mark.parametrize("name, cls", [("earl", EARLRanker), ("mva", MVARanker), ("mva-de", MVARanker)])
def test_an_old_checkpoint_loads_every_weight(name, cls):
    path, state = old_checkpoint(name)
    assert all(k.startswith("ranker.") for k in state["state_dict"])
    expected = {"model." + k.removeprefix("ranker."): v for k, v in state["state_dict"].items()}
    for loaded in (cls.load_from_checkpoint(path, map_location="cpu"),
                   cls(**settings(state) | {"init_checkpoint": str(path)})):  # fmt: skip
        mine = loaded.state_dict()
        assert mine.keys() == expected.keys()
        assert all(torch.equal(mine[k], v) for k, v in expected.items())


def test_init_encoder_takes_an_old_dual_encoders_encoder():
    path, state = old_checkpoint("mva-de")
    model = MVARanker(**settings(state) | {"architecture": "mva", "init_encoder": str(path)})
    old = state["state_dict"]
    encoder = {k.removeprefix("ranker.bert."): v for k, v in old.items() if k.startswith("ranker.bert.")}
    mine = model.model.bert.state_dict()
    assert mine.keys() == encoder.keys() and all(torch.equal(mine[k], v) for k, v in encoder.items())
