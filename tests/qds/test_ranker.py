"""`QDSRanker`'s training step: the official weighted BCE, by hand."""

import math

import pytest
import torch
from torch import nn

from qds.ranker import QDSRanker


class FixedScores(nn.Module):
    """Stands in for the ranker: the scores of a training group, whatever the batch."""

    def __init__(self, scores):
        super().__init__()
        self.scores = torch.tensor(scores)

    def forward(self, batch):
        return self.scores


@pytest.mark.parametrize("negatives, balanced, positive_weight", [(3, True, 3.0), (3, False, 1.0), (1, True, 1.0)])
def test_training_step_is_the_official_weighted_bce(negatives, balanced, positive_weight):
    """Official experiment.py lines 46-49: BCEWithLogitsLoss(reduction='mean', pos_weight=[num_neg_samples]), so
    loss = mean over the documents of -w_y [y log sigmoid(s) + (1 - y) log(1 - sigmoid(s))] with w = negatives on
    the positive: -log sigmoid(s) = log(1 + e^-s) and -log(1 - sigmoid(s)) = log(1 + e^s)."""
    model = QDSRanker(tokenizer="builtin", window=4, num_layers=1, hidden_size=8, num_heads=1,
                      intermediate_size=16, max_length=64, negatives=negatives, balanced_loss=balanced)
    scores = [2.0, -1.0, 0.5, -3.0][: negatives + 1]  # the positive first, then its negatives
    model.model = FixedScores(scores)
    labels = torch.tensor([1.0] + [0.0] * negatives)
    by_hand = (positive_weight * math.log(1 + math.exp(-2.0))
               + sum(math.log(1 + math.exp(s)) for s in scores[1:])) / len(scores)  # fmt: skip
    loss = model.training_step({"labels": labels}, 0)
    assert loss.item() == pytest.approx(by_hand, abs=1e-6)
