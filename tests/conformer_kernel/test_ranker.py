"""`conformer_kernel.ranker`: RankNet (the Conformer-Kernel's training objective) on hand-computed pairs."""

import math

import pytest
import torch

from conformer_kernel.ranker import ranknet_loss


def _nls(x: float) -> float:
    """-log σ(x)."""
    return -math.log(1 / (1 + math.exp(-x)))


def test_three_documents_three_pairs():
    scores = torch.tensor([[2.0, 0.0, 1.0]])
    labels = torch.tensor([[2.0, 1.0, 0.0]])
    # pairs (higher label first): (d0, d1): 2 - 0; (d0, d2): 2 - 1; (d1, d2): 0 - 1
    want = (_nls(2.0) + _nls(1.0) + _nls(-1.0)) / 3
    assert want == pytest.approx((0.126928 + 0.313262 + 1.313262) / 3, abs=1e-6)
    assert ranknet_loss(scores, labels).item() == pytest.approx(want, rel=1e-6)


def test_query_without_pairs_contributes_zero():
    scores = torch.tensor([[2.0, 0.0, 1.0], [5.0, -3.0, 0.5]])
    labels = torch.tensor([[2.0, 1.0, 0.0], [1.0, 1.0, 1.0]])  # the second query has tied labels only
    want = ((_nls(2.0) + _nls(1.0) + _nls(-1.0)) / 3 + 0.0) / 2
    assert ranknet_loss(scores, labels).item() == pytest.approx(want, rel=1e-6)
    # only tied queries: 0
    assert ranknet_loss(torch.tensor([[1.0, 2.0]]), torch.tensor([[0, 0]])).item() == 0.0


def test_per_query_mean_then_mean_over_queries():
    """Each query's pairs are averaged first, then the queries (not one mean over all pairs)."""
    scores = torch.tensor([[0.5, 0.0, 9.0], [1.0, 3.0, -2.0]])
    labels = torch.tensor([[1.0, 0.0, 1.0],  # pairs (d0, d1), (d2, d1)
                           [1.0, 0.0, 0.0]])  # pairs (d0, d1), (d0, d2)
    q1 = (_nls(0.5 - 0.0) + _nls(9.0 - 0.0)) / 2
    q2 = (_nls(1.0 - 3.0) + _nls(1.0 + 2.0)) / 2
    assert ranknet_loss(scores, labels).item() == pytest.approx((q1 + q2) / 2, rel=1e-6)


def test_gradient_pushes_the_better_document_up():
    scores = torch.tensor([[0.3, 1.1]], requires_grad=True)
    labels = torch.tensor([[1.0, 0.0]])
    ranknet_loss(scores, labels).backward()
    # d/ds0 -log σ(s0 - s1) = -σ(s1 - s0); d/ds1 = +σ(s1 - s0)
    s = 1 / (1 + math.exp(-(1.1 - 0.3)))
    assert scores.grad[0, 0].item() == pytest.approx(-s, rel=1e-6) and scores.grad[0, 0] < 0
    assert scores.grad[0, 1].item() == pytest.approx(s, rel=1e-6) and scores.grad[0, 1] > 0


def test_stable_for_large_margins():
    """logsigmoid: no inf / nan where σ underflows (the official code's +1e-6 would cap it at 13.8)."""
    loss = ranknet_loss(torch.tensor([[-100.0, 100.0]]), torch.tensor([[1.0, 0.0]]))
    assert loss.item() == pytest.approx(200.0, rel=1e-6)
