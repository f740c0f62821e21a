"""`mva.ranker`: the softmax cross-entropy over a triple's two scores (Sec. 2.3), worked by hand."""

import math

import pytest
import torch

from mva.ranker import softmax_loss


def test_softmax_loss_by_hand():
    """Sec. 2.3: -log(e^s+ / (e^s+ + e^s-)) averaged over triples."""
    scores = torch.tensor([[2.0, 0.0], [0.0, 1.0]]).double()
    expected = (math.log(1 + math.exp(-2)) + math.log(1 + math.exp(1))) / 2
    assert softmax_loss(scores).item() == pytest.approx(expected, abs=1e-12)
