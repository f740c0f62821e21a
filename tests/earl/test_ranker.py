"""`earl.ranker`: the training loss EARL and BERT-Siamese train with (Sec. 3.4), worked by hand."""

import pytest
import torch

from earl.ranker import hinge_loss


def test_hinge_loss_by_hand():
    """Sec. 3.4: mean of max(0, margin - s+ + s-)."""
    positive, negative = torch.tensor([2.0, 0.5, 1.0]), torch.tensor([0.5, 1.0, 1.0])
    assert hinge_loss(positive, negative, margin=1).item() == pytest.approx((0 + 1.5 + 1.0) / 3, abs=1e-7)
    assert hinge_loss(positive, negative, margin=0.5).item() == pytest.approx((0 + 1.0 + 0.5) / 3, abs=1e-7)
