"""The official checkpoint's names (``base.`` Longformer, ``hidden_layer``/``final_layer`` head) load into `qds`."""

import pytest
import torch

from qds.checkpoint import from_official, load_official
from qds.model import QDSTransformer

SIZES = dict(pattern="qds", tokenizer="builtin", window=8, num_layers=1, hidden_size=16, num_heads=1,
             intermediate_size=32, max_length=64, impl="portable")  # fmt: skip


def official_state_dict(model: QDSTransformer) -> dict:
    """A state dict in the official naming, written out name by name for a 1-layer model, random values."""
    names = ["embeddings.word_embeddings.weight", "embeddings.position_embeddings.weight",
             "embeddings.token_type_embeddings.weight", "embeddings.LayerNorm.weight", "embeddings.LayerNorm.bias"]
    for proj in ("query", "key", "value", "query_global", "key_global", "value_global"):
        names += [f"encoder.layer.0.attention.self.{proj}.weight", f"encoder.layer.0.attention.self.{proj}.bias"]
    for part in ("attention.output.dense", "attention.output.LayerNorm", "intermediate.dense", "output.dense",
                 "output.LayerNorm"):
        names += [f"encoder.layer.0.{part}.weight", f"encoder.layer.0.{part}.bias"]
    names += ["pooler.dense.weight", "pooler.dense.bias"]
    ours = model.state_dict()
    generator = torch.Generator().manual_seed(1)
    state = {f"base.{n}": torch.randn(ours[f"ranker.encoder.{n}"].shape, generator=generator) for n in names}
    state["base.embeddings.position_ids"] = torch.arange(64)[None]  # a buffer older transformers saved
    for official, head in (("hidden_layer", "hidden"), ("final_layer", "out")):
        for kind in ("weight", "bias"):
            state[f"{official}.{kind}"] = torch.randn(ours[f"ranker.head.{head}.{kind}"].shape, generator=generator)
    return state


def test_every_official_tensor_lands_in_its_place(tmp_path):
    model = QDSTransformer(**SIZES)
    state = official_state_dict(model)
    torch.save(state, tmp_path / "model.QDST.best.pt")
    load_official(model, tmp_path / "model.QDST.best.pt")
    loaded = model.state_dict()
    assert torch.equal(loaded["ranker.encoder.encoder.layer.0.attention.self.query_global.weight"],
                       state["base.encoder.layer.0.attention.self.query_global.weight"])
    assert torch.equal(loaded["ranker.head.hidden.weight"], state["hidden_layer.weight"])
    assert torch.equal(loaded["ranker.head.out.bias"], state["final_layer.bias"])
    mapped = from_official(state)
    assert len(mapped) == len(state) - 1  # everything but position_ids
    assert all(torch.equal(loaded[k], v) for k, v in mapped.items())


def test_unknown_or_misfitting_keys_are_errors(tmp_path):
    model = QDSTransformer(**SIZES)
    state = official_state_dict(model)
    with pytest.raises(KeyError, match="classifier.weight"):
        from_official({**state, "classifier.weight": torch.zeros(1)})
    del state["base.pooler.dense.bias"]
    torch.save(state, tmp_path / "partial.pt")
    with pytest.raises(ValueError, match="pooler.dense.bias"):
        load_official(model, tmp_path / "partial.pt")
    torch.save(model.state_dict(), tmp_path / "ours.pt")
    with pytest.raises(ValueError, match="not an official"):
        load_official(model, tmp_path / "ours.pt")
