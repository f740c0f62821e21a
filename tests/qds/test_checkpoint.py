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


def test_evaluate_runs_the_official_release_from_a_local_longformer(tmp_path):
    """The whole official path offline: a Longformer folder by path (as longformer-base-4096 would be
    given), the built-in tokenizer by path, the official state dict; `qds.evaluate` re-ranks with it."""
    from transformers import LongformerConfig, LongformerModel

    from qds import evaluate
    from common.tokenizer import builtin_tokenizer_path, load_tokenizer

    vocab = len(load_tokenizer("builtin"))
    config = LongformerConfig(vocab_size=vocab, hidden_size=16, num_hidden_layers=1, num_attention_heads=1,
                              intermediate_size=32, max_position_embeddings=2050, attention_window=8, type_vocab_size=1,
                              pad_token_id=1)  # fmt: skip
    torch.manual_seed(0)
    LongformerModel(config).save_pretrained(tmp_path / "longformer")
    model = QDSTransformer(pattern="qds", encoder=str(tmp_path / "longformer"), tokenizer="builtin", window=8,
                           impl="portable")
    state = official_state_dict(model)
    torch.save(state, tmp_path / "model.QDST.best.pt")
    metrics = evaluate.main([
        "--checkpoint", str(tmp_path / "model.QDST.best.pt"), "--encoder", str(tmp_path / "longformer"),
        "--tokenizer", str(builtin_tokenizer_path()), "--window", "8", "--impl", "portable",
        "--candidates", "builtin:test", "--depth", "3", "--output_dir", str(tmp_path / "eval"),
    ])  # fmt: skip
    assert set(metrics) == {"qds", "bm25"} and 0 <= metrics["qds"]["ndcg_cut_10"] <= 1
    # the loaded weights are the official ones, not the folder's
    reloaded, _ = evaluate.load_model(evaluate.build_parser().parse_args([
        "--checkpoint", str(tmp_path / "model.QDST.best.pt"), "--encoder", str(tmp_path / "longformer"),
        "--tokenizer", str(builtin_tokenizer_path()), "--window", "8", "--impl", "portable"]))
    assert torch.equal(reloaded.ranker.head.out.weight, state["final_layer.weight"])
