"""`common.encoders.dropout`: nn.Dropout's distribution (p rounded to 2^-15) from a quarter of the random draws."""

import math

import pytest
import torch
from torch import nn

from common.encoders.dropout import Dropout, attention, dropout, use_fast_bert_dropout, use_fast_dropout

#: p rounded to a multiple of 2^-15, by hand: 0.1 * 32768 = 3276.8 -> 3277 (0.1000061), 0.9 * 32768 = 29491.2 -> 29491.
ROUNDED = {0.1: 3277 / 32768, 0.2: 6554 / 32768, 0.5: 0.5, 0.9: 29491 / 32768}


def test_p_is_rounded_to_a_multiple_of_2_to_the_minus_15():
    assert ROUNDED[0.1] == pytest.approx(0.1000061, abs=1e-7)
    x = torch.ones(64)
    assert torch.equal(dropout(x, 0.0), x) and torch.equal(dropout(x, 1.0), torch.zeros(64))


@pytest.mark.parametrize("p", [0.1, 0.2, 0.5, 0.9])
def test_kept_elements_are_scaled_by_one_over_one_minus_p(p):
    torch.manual_seed(0)
    x = torch.randn(1001, 37)  # 37,037 elements: the last draw's last quarters are unused
    y = dropout(x, p)
    kept = y != 0
    scale = 1 / (1 - ROUNDED[p])
    torch.testing.assert_close(y[kept], x[kept] * scale, rtol=0, atol=0)


@pytest.mark.parametrize("p", [0.1, 0.2, 0.5])
def test_each_quarter_of_a_draw_drops_with_probability_p(p):
    """The four 16-bit quarters of each 64-bit draw (elements 4k, 4k + 1, 4k + 2, 4k + 3) are each dropped with
    the rounded p: a quarter read with its top bit would drop at about p / 2 or (1 + p) / 2."""
    torch.manual_seed(1)
    n = 4_000_000
    dropped = dropout(torch.ones(n), p) == 0
    q = ROUNDED[p]
    sigma = math.sqrt(q * (1 - q) / (n / 4))
    for quarter in range(4):
        assert abs(dropped[quarter::4].double().mean().item() - q) < 5 * sigma


def test_the_expectation_is_the_input():
    torch.manual_seed(2)
    n, p = 4_000_000, 0.1
    mean = dropout(torch.ones(n), p).double().mean().item()
    q = ROUNDED[p]
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
    expected = (y != 0).float() / (1 - ROUNDED[0.2])
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


# --- attention dropout (`attention`, `use_fast_bert_dropout`) ------------------------------------------------------


def test_attention_drops_the_probabilities_with_the_documented_mask():
    """softmax(Q K^T / sqrt(d)) with masked keys, each probability kept where its 15-bit integer (the draws' quarters,
    module docstring) reaches round(p 2^15) and scaled by 1 / (1 - rounded p), then V: rebuilt here from the same
    seed's draws."""
    torch.manual_seed(5)
    q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 6, 8), torch.randn(2, 3, 6, 8)
    keep = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], dtype=torch.bool)[:, None, None, :]
    torch.manual_seed(6)
    got = attention(q, k, v, keep, 0.2)
    torch.manual_seed(6)
    n = 2 * 3 * 4 * 6
    draws = torch.empty((n + 3) // 4, dtype=torch.int64).random_()
    quarters = [(int(x) >> (16 * j)) & 0x7FFF for x in draws.tolist() for j in range(4)]  # little-endian quarters
    kept = torch.tensor(quarters[:n]).view(2, 3, 4, 6) >= round(0.2 * 2**15)
    probabilities = (q @ k.transpose(-1, -2) / math.sqrt(8)).masked_fill(~keep, -math.inf).softmax(-1)
    want = (probabilities * kept / (1 - ROUNDED[0.2])) @ v
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_attention_without_dropout_is_sdpa():
    torch.manual_seed(7)
    q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 6, 8), torch.randn(2, 3, 6, 8)
    keep = torch.rand(2, 1, 4, 6) > 0.3
    keep[..., 0] = True
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    assert torch.equal(attention(q, k, v, keep, 0.1, training=False), want)
    assert torch.equal(attention(q, k, v, keep, 0.0), want)


def small_bert_pair():
    from transformers import BertConfig, BertModel

    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=16)
    torch.manual_seed(8)
    stock = BertModel(config, add_pooling_layer=False)
    fast = BertModel(config, add_pooling_layer=False)
    fast.load_state_dict(stock.state_dict())
    tokens, mask = torch.randint(1, 50, (3, 9)), torch.ones(3, 9, dtype=torch.long)
    mask[1, 6:] = 0
    assert use_fast_bert_dropout(fast) is fast
    return stock, fast, tokens, mask


def test_fast_bert_dropout_leaves_evaluation_bit_for_bit_and_draws_no_bernoulli_in_training():
    """A Hugging Face BERT under `use_fast_bert_dropout`: in eval mode the stock model's outputs exactly (``sdpa``
    where nothing is dropped); in training no ``nn.Dropout`` left and no ``bernoulli_`` drawn (attention dropout
    included), the output changed by dropout all the same."""
    stock, fast, tokens, mask = small_bert_pair()
    stock.eval(), fast.eval()
    assert torch.equal(fast(tokens, attention_mask=mask).last_hidden_state,
                       stock(tokens, attention_mask=mask).last_hidden_state)
    fast.train()
    assert not any(type(m) is nn.Dropout for m in fast.modules())
    with torch.profiler.profile() as profile:
        trained = fast(tokens, attention_mask=mask).last_hidden_state
    names = {event.key for event in profile.key_averages()}
    assert "aten::bernoulli_" not in names and "aten::random_" in names
    assert not torch.allclose(trained, stock.eval()(tokens, attention_mask=mask).last_hidden_state)


def test_attention_off_the_cpu_leaves_dropout_to_sdpa(monkeypatch):
    """On another device `attention` is SDPA with its own dropout (fused kernels there), not the CPU masks: checked
    on the meta device, through the arguments SDPA receives."""
    seen = {}

    def sdpa(query, key, value, attn_mask=None, scale=None, dropout_p=0.0):
        seen.update(dropout_p=dropout_p, device=query.device.type)
        return value

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", sdpa)
    q = torch.empty(2, 3, 4, 8, device="meta")
    attention(q, q, q, None, 0.1)
    assert seen == {"dropout_p": 0.1, "device": "meta"}
    attention(q, q, q, None, 0.1, training=False)
    assert seen["dropout_p"] == 0.0
