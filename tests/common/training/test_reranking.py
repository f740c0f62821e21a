"""`common.training.reranking`: the state-dict keys of older checkpoints, and AdamW's parameter groups."""

import torch
from torch import nn

from common.training.reranking import decay_groups, renamed_state


def test_keys_of_the_paper_module_held_as_ranker_are_read_as_model():
    weight, bias, scale = torch.ones(2, 2), torch.zeros(2), torch.ones(())
    old = {"ranker.encoder.weight": weight, "ranker.head.bias": bias, "metrics.scale": scale}
    assert renamed_state(old) == {"model.encoder.weight": weight, "model.head.bias": bias, "metrics.scale": scale}
    today = {"model.encoder.weight": weight, "model.ranker.bias": bias}  # only a leading `ranker.` is renamed
    assert renamed_state(today) == today


def test_weight_decay_on_matrices_only():
    module = nn.Sequential(nn.Linear(3, 2), nn.LayerNorm(2))
    decay, no_decay = decay_groups(module, 0.01)
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0
    assert [p.shape for p in decay["params"]] == [(2, 3)]
    assert [p.shape for p in no_decay["params"]] == [(2,), (2,), (2,)]  # the Linear's bias, LayerNorm's weight, bias
