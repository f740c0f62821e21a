"""The Conformer layer (grouped convolution + separable attention, Sec. 3) and the document encoder."""

import pytest
import torch
from torch import nn

from conformer_kernel.model import (
    ConformerLayer,
    DocumentEncoder,
    DotProductSelfAttention,
    SeparableSelfAttention,
)


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _layer(hidden=16, heads=4, conv_window=31, separable=True, seed=0) -> ConformerLayer:
    torch.manual_seed(seed)
    return ConformerLayer(hidden, heads, dropout=0.2, conv_window=conv_window, separable=separable).eval()


def test_grouped_convolution_shape_and_length():
    layer = _layer(hidden=16, heads=4)
    conv = layer.conv
    assert isinstance(conv, nn.Conv1d)
    assert conv.groups == 4 and conv.kernel_size == (31,) and conv.padding == (15,)
    assert conv.in_channels == conv.out_channels == 16
    assert conv.weight.shape == (16, 4, 31)  # each output channel reads the 16 / 4 channels of its group
    assert isinstance(layer.attn, SeparableSelfAttention)
    x = torch.randn(2, 40, 16)
    assert conv(x.transpose(1, 2)).shape == (2, 16, 40)  # "same" length
    assert layer(x, torch.zeros(2, 40, dtype=torch.bool)).shape == (2, 40, 16)


def test_convolution_is_local_and_grouped():
    hidden, heads, n = 16, 4, 100
    conv = _layer(hidden, heads).conv
    group = hidden // heads
    x = torch.randn(1, hidden, n, generator=torch.Generator().manual_seed(1))
    base = conv(x)
    for p, c in [(50, 5), (3, 0), (97, 15)]:
        x2 = x.clone()
        x2[0, c, p] += 2.0
        diff = (conv(x2) - base)[0].detach()  # (hidden, n)
        g = c // group
        inside = torch.zeros(hidden, n, dtype=torch.bool)
        inside[g * group : (g + 1) * group, max(p - 15, 0) : p + 16] = True
        assert torch.equal(diff[~inside], torch.zeros(int((~inside).sum())))  # exactly no change outside
        # inside: out[o, t] changes by w[o, c - g*group, p - t + 15] * 2
        for o in range(g * group, (g + 1) * group):
            for t in range(max(p - 15, 0), min(p + 16, n)):
                want = 2.0 * conv.weight[o, c - g * group, p - t + 15].item()
                assert abs(diff[o, t].item() - want) < 1e-5


def test_layer_is_conv_then_attention_then_feed_forward_post_norm():
    """x = LN1(x + Attn(Conv(x with padding zeroed))); x = LN2(x + FF(x)), in eval mode."""
    layer = _layer(hidden=16, heads=4)
    x = torch.randn(2, 20, 16, generator=torch.Generator().manual_seed(2))
    padding = torch.zeros(2, 20, dtype=torch.bool)
    padding[1, 12:] = True
    with torch.no_grad():
        h = x.clone()
        h[padding] = 0.0
        h = layer.conv(h.transpose(1, 2)).transpose(1, 2)
        y = layer.norm1(x + layer.attn(h, padding))
        want = layer.norm2(y + layer.ff(y))
        torch.testing.assert_close(layer(x, padding), want, rtol=0, atol=1e-6)


def test_encoder_output_does_not_depend_on_padding_length():
    torch.manual_seed(3)
    encoder = DocumentEncoder(hidden=16, heads=4, layers=2, dropout=0.2, max_len=200).eval()
    g = torch.Generator().manual_seed(4)
    length = 23
    doc = torch.randn(1, length, 16, generator=g)
    short = encoder(doc, torch.ones(1, length))
    long_x = torch.cat([doc, torch.randn(1, 2 * length, 16, generator=g) * 3], dim=1)  # garbage padding
    long_mask = torch.cat([torch.ones(1, length), torch.zeros(1, 2 * length)], dim=1)
    long = encoder(long_x, long_mask)
    torch.testing.assert_close(long[:, :length], short, rtol=0, atol=1e-6)
    # batched beside a longer document: same again
    other = torch.randn(1, 3 * length, 16, generator=g)
    batch = encoder(torch.cat([long_x, other]), torch.cat([long_mask, torch.ones(1, 3 * length)]))
    torch.testing.assert_close(batch[:1, :length], short, rtol=0, atol=1e-6)


def test_encoder_output_would_change_if_padding_reached_the_conv():
    """The garbage padding above is not harmless by accident: feeding it as real terms changes the output."""
    torch.manual_seed(3)
    encoder = DocumentEncoder(hidden=16, heads=4, layers=2, dropout=0.2, max_len=200).eval()
    g = torch.Generator().manual_seed(4)
    doc = torch.randn(1, 23, 16, generator=g)
    long_x = torch.cat([doc, torch.randn(1, 46, 16, generator=g) * 3], dim=1)
    short = encoder(doc, torch.ones(1, 23))
    unmasked = encoder(long_x, torch.ones(1, 69))
    assert (unmasked[:, :23] - short).abs().max() > 1e-2


def test_transformer_kernel_variant():
    layer = _layer(hidden=16, heads=4, conv_window=None, separable=False)
    assert layer.conv is None
    assert isinstance(layer.attn, DotProductSelfAttention)
    assert layer.attn.in_proj.weight.shape == (48, 16)  # separate Q, K, V
    assert not any(isinstance(m, nn.Conv1d) for m in layer.modules())
    x = torch.randn(2, 9, 16, generator=torch.Generator().manual_seed(5))
    padding = torch.zeros(2, 9, dtype=torch.bool)
    padding[0, 6:] = True
    with torch.no_grad():
        y = layer.norm1(x + layer.attn(x, padding))
        want = layer.norm2(y + layer.ff(y))
        torch.testing.assert_close(layer(x, padding), want, rtol=0, atol=1e-6)
    encoder = DocumentEncoder(16, 4, 2, 0.2, 100, conv_window=None, separable=False)
    assert all(lyr.conv is None and isinstance(lyr.attn, DotProductSelfAttention) for lyr in encoder.layers)
