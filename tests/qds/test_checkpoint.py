"""The released checkpoint's names and shapes, written out from the official model code, load into `qds`.

The release (``results/qdst_model.pt.tar.gz.part_*`` of hallogameboy/QDS-Transformer) is
``torch.save(model.state_dict())`` (``src/experiment.py`` line 78) of ``modellib.QDSTModel``
(``src/modellib.py`` lines 22-28)::

    self.base = Longformer.from_pretrained('longformer-base-4096/')
    self.hidden_layer = nn.Linear(hidden_size, hidden_size, bias=True)
    self.final_layer = nn.Linear(hidden_size, 1, bias=True)

``Longformer`` is allenai/longformer's ``RobertaModel`` whose every ``layer.attention.self`` is a
``LongformerSelfAttention`` holding ``query``, ``key``, ``value``, ``query_global``, ``key_global``,
``value_global`` (``longformer/longformer.py`` lines 12-19 and 66-72); the rest is transformers'
RoBERTa: embeddings (word, position, token type, LayerNorm), per layer ``attention.output.dense``,
``attention.output.LayerNorm``, ``intermediate.dense``, ``output.dense``, ``output.LayerNorm``, and
``pooler.dense``. longformer-base-4096: vocabulary 50,265, 4,098 positions, 1 token type, hidden
768, 12 layers, feed-forward 3,072.
"""

import argparse

import pytest
import torch

from qds.checkpoint import from_official, load_official
from qds.ranker import QDSRanker

SIZES = dict(pattern="qds", tokenizer="builtin", window=8, num_layers=1, hidden_size=16, num_heads=1,
             intermediate_size=32, max_length=64, impl="portable")
BASE = dict(layers=12, hidden=768, intermediate=3072, vocab=50265, positions=4098)  # longformer-base-4096


def released_shapes(layers: int, hidden: int, intermediate: int, vocab: int, positions: int) -> dict[str, tuple]:
    """Every key of the released state dict and its shape (see the module docstring), for these sizes."""
    shapes = {
        "base.embeddings.word_embeddings.weight": (vocab, hidden),
        "base.embeddings.position_embeddings.weight": (positions, hidden),
        "base.embeddings.token_type_embeddings.weight": (1, hidden),
        "base.embeddings.LayerNorm.weight": (hidden,),
        "base.embeddings.LayerNorm.bias": (hidden,),
    }
    for i in range(layers):
        layer = f"base.encoder.layer.{i}"
        for proj in ("query", "key", "value", "query_global", "key_global", "value_global"):
            shapes |= {f"{layer}.attention.self.{proj}.weight": (hidden, hidden),
                       f"{layer}.attention.self.{proj}.bias": (hidden,)}
        shapes |= {
            f"{layer}.attention.output.dense.weight": (hidden, hidden),
            f"{layer}.attention.output.dense.bias": (hidden,),
            f"{layer}.attention.output.LayerNorm.weight": (hidden,),
            f"{layer}.attention.output.LayerNorm.bias": (hidden,),
            f"{layer}.intermediate.dense.weight": (intermediate, hidden),
            f"{layer}.intermediate.dense.bias": (intermediate,),
            f"{layer}.output.dense.weight": (hidden, intermediate),
            f"{layer}.output.dense.bias": (hidden,),
            f"{layer}.output.LayerNorm.weight": (hidden,),
            f"{layer}.output.LayerNorm.bias": (hidden,),
        }
    return shapes | {
        "base.pooler.dense.weight": (hidden, hidden),
        "base.pooler.dense.bias": (hidden,),
        "hidden_layer.weight": (hidden, hidden),
        "hidden_layer.bias": (hidden,),
        "final_layer.weight": (1, hidden),
        "final_layer.bias": (1,),
    }


def official_state_dict(model: QDSRanker) -> dict:
    """A released-style state dict for the 1-layer `SIZES` model, random values."""
    vocab, hidden = model.model.encoder.embeddings.word_embeddings.weight.shape
    positions = model.model.encoder.embeddings.position_embeddings.weight.shape[0]
    generator = torch.Generator().manual_seed(1)
    shapes = released_shapes(layers=1, hidden=hidden, intermediate=32, vocab=vocab, positions=positions)
    state = {key: torch.randn(shape, generator=generator) for key, shape in shapes.items()}
    state["base.embeddings.position_ids"] = torch.arange(positions)[None]  # a buffer some transformers saved
    return state


def test_the_released_names_and_shapes_fit_a_base_size_model():
    shapes = released_shapes(**BASE)
    assert len(shapes) == 5 + 12 * 22 + 6
    with torch.device("meta"):  # names and shapes only: no memory for 149M parameters
        model = QDSRanker(pattern="qds", tokenizer="builtin", window=128, max_length=4096)
    ours = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    mapped = from_official({k: torch.empty(shape, device="meta") for k, shape in shapes.items()})
    assert set(mapped) == set(ours)
    for key, tensor in mapped.items():
        if key != "model.encoder.embeddings.word_embeddings.weight":  # the built-in tokenizer's vocabulary here
            assert tuple(tensor.shape) == ours[key], key
    assert ours["model.encoder.embeddings.word_embeddings.weight"][1] == 768


def test_every_official_tensor_lands_in_its_place(tmp_path):
    model = QDSRanker(**SIZES)
    state = official_state_dict(model)
    torch.save(state, tmp_path / "model.QDST.best.pt")
    load_official(model, tmp_path / "model.QDST.best.pt")
    loaded = model.state_dict()
    assert torch.equal(loaded["model.encoder.encoder.layer.0.attention.self.query_global.weight"],
                       state["base.encoder.layer.0.attention.self.query_global.weight"])
    assert torch.equal(loaded["model.head.hidden.weight"], state["hidden_layer.weight"])
    assert torch.equal(loaded["model.head.out.bias"], state["final_layer.bias"])
    mapped = from_official(state)
    assert len(mapped) == len(state) - 1  # everything but position_ids
    assert all(torch.equal(loaded[k], v) for k, v in mapped.items())


def test_unknown_or_misfitting_keys_are_errors(tmp_path):
    model = QDSRanker(**SIZES)
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
    from common.encoders.tokenizers import builtin_tokenizer_path, load_tokenizer

    vocab = len(load_tokenizer("builtin"))
    config = LongformerConfig(vocab_size=vocab, hidden_size=16, num_hidden_layers=1, num_attention_heads=1,
                              intermediate_size=32, max_position_embeddings=2050, attention_window=8, type_vocab_size=1,
                              pad_token_id=1)
    torch.manual_seed(0)
    LongformerModel(config).save_pretrained(tmp_path / "longformer")
    model = QDSRanker(pattern="qds", encoder=str(tmp_path / "longformer"), tokenizer="builtin", window=8,
                           impl="portable")
    state = official_state_dict(model)
    torch.save(state, tmp_path / "model.QDST.best.pt")
    metrics = evaluate.main([
        "--checkpoint", str(tmp_path / "model.QDST.best.pt"), "--encoder", str(tmp_path / "longformer"),
        "--tokenizer", str(builtin_tokenizer_path()), "--window", "8", "--impl", "portable",
        "--task", "builtin:test", "--depth", "3", "--output_dir", str(tmp_path / "eval"),
    ])
    assert set(metrics) == {"qds", "bm25"} and 0 <= metrics["qds"]["ndcg_cut_10"] <= 1
    # the loaded weights are the official ones, not the folder's
    reloaded = evaluate.load_model(evaluate.build_parser().parse_args([
        "--checkpoint", str(tmp_path / "model.QDST.best.pt"), "--encoder", str(tmp_path / "longformer"),
        "--tokenizer", str(builtin_tokenizer_path()), "--window", "8", "--impl", "portable"]))
    assert torch.equal(reloaded.model.head.out.weight, state["final_layer.weight"])


def test_evaluate_reads_each_checkpoint_with_the_layout_it_was_trained_on():
    from qds import evaluate

    args = argparse.Namespace(tokenizer="roberta-base")  # the official release's --tokenizer
    model = QDSRanker(**SIZES)
    assert evaluate.checkpoint_settings(args, official_state_dict(model))[1]["layout"] == "official"
    trained = {"state_dict": {}, "hyper_parameters": {"pattern": "qds"}, "datamodule_hyper_parameters": {"layout": "sos"}}
    assert evaluate.checkpoint_settings(args, trained)[1]["layout"] == "sos"
