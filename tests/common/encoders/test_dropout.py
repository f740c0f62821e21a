"""`common.encoders.dropout`: nn.Dropout's distribution (p rounded to 2^-15) from a quarter of the random draws."""

import math

import pytest
import torch
from torch import nn

from common.encoders.dropout import Dropout, dropout, rounded_probability, use_fast_dropout


def test_p_is_rounded_to_a_multiple_of_2_to_the_minus_15():
    assert rounded_probability(0.1) == 3277 / 32768 == pytest.approx(0.1000061, abs=1e-7)
    assert rounded_probability(0.2) == 6554 / 32768
    assert rounded_probability(0.5) == 0.5
    assert rounded_probability(0.0) == 0.0 and rounded_probability(1.0) == 1.0


@pytest.mark.parametrize("p", [0.1, 0.2, 0.5, 0.9])
def test_kept_elements_are_scaled_by_one_over_one_minus_p(p):
    torch.manual_seed(0)
    x = torch.randn(1001, 37)  # 37,037 elements: the last draw's last quarters are unused
    y = dropout(x, p)
    kept = y != 0
    scale = 1 / (1 - rounded_probability(p))
    torch.testing.assert_close(y[kept], x[kept] * scale, rtol=0, atol=0)


@pytest.mark.parametrize("p", [0.1, 0.2, 0.5])
def test_each_quarter_of_a_draw_drops_with_probability_p(p):
    """The four 16-bit quarters of each 64-bit draw (elements 4k, 4k + 1, 4k + 2, 4k + 3) are each dropped with
    the rounded p: a quarter read with its top bit would drop at about p / 2 or (1 + p) / 2."""
    torch.manual_seed(1)
    n = 4_000_000
    dropped = dropout(torch.ones(n), p) == 0
    q = rounded_probability(p)
    sigma = math.sqrt(q * (1 - q) / (n / 4))
    for quarter in range(4):
        assert abs(dropped[quarter::4].double().mean().item() - q) < 5 * sigma


def test_the_expectation_is_the_input():
    torch.manual_seed(2)
    n, p = 4_000_000, 0.1
    mean = dropout(torch.ones(n), p).double().mean().item()
    q = rounded_probability(p)
    sigma = math.sqrt(q / (1 - q) / n)  # standard deviation of the mean of Bernoulli(1 - q) / (1 - q)
    assert abs(mean - 1.0) < 5 * sigma


def test_identity_in_evaluation_and_at_p_0_zeros_at_p_1():
    x = torch.randn(5, 7)
    assert dropout(x, 0.3, training=False) is x
    assert dropout(x, 0.0) is x
    assert torch.equal(dropout(x, 1.0), torch.zeros_like(x))


def test_the_gradient_is_the_mask_times_the_scale():
    torch.manual_seed(3)
    x = torch.randn(64, 33, requires_grad=True)
    y = dropout(x, 0.2)
    (grad,) = torch.autograd.grad(y.sum(), x)
    expected = (y != 0).float() / (1 - rounded_probability(0.2))
    torch.testing.assert_close(grad, expected, rtol=0, atol=0)


def test_a_seed_gives_the_same_mask():
    x = torch.randn(100, 50)
    torch.manual_seed(4)
    a = dropout(x, 0.3)
    torch.manual_seed(4)
    assert torch.equal(a, dropout(x, 0.3))


def test_use_fast_dropout_replaces_every_nn_dropout_with_its_p_and_mode():
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.1), nn.Sequential(nn.Dropout(0.3), nn.ReLU()))
    model[2].eval()
    assert use_fast_dropout(model) is model
    first, second = model[1], model[2][0]
    assert type(first) is Dropout and first.p == 0.1 and first.training
    assert type(second) is Dropout and second.p == 0.3 and not second.training
    assert not any(type(m) is nn.Dropout for m in model.modules())
