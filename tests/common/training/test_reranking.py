"""`common.training.reranking`: AdamW's parameter groups."""

from torch import nn

from common.training.reranking import decay_groups


def test_weight_decay_on_matrices_only():
    module = nn.Sequential(nn.Linear(3, 2), nn.LayerNorm(2))
    decay, no_decay = decay_groups(module, 0.01)
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0
    assert [p.shape for p in decay["params"]] == [(2, 3)]
    assert [p.shape for p in no_decay["params"]] == [(2,), (2,), (2,)]  # the Linear's bias, LayerNorm's weight, bias
