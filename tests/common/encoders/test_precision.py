"""`common.encoders.precision.full_precision`: the plain call without autocast, float32 scores under bf16 autocast."""

import torch
from torch import nn

from common.encoders.precision import full_precision


def _layer_and_inputs():
    torch.manual_seed(0)
    layer = nn.Linear(64, 1)
    base = torch.randn(64)
    # 16 representations that differ in their last bits: in bf16 most of their scores collide
    x = base + 1e-4 * torch.randn(16, 64)
    return layer, x


def test_without_autocast_it_is_the_plain_call():
    layer, x = _layer_and_inputs()
    got = full_precision(layer, x, dtype=layer.weight.dtype)
    assert got.dtype == torch.float32 and torch.equal(got, layer(x))
    double = nn.Linear(64, 1).double()
    assert torch.equal(full_precision(double, x.double(), dtype=torch.float64), double(x.double()))


def test_under_bf16_autocast_scores_keep_float32_resolution():
    layer, x = _layer_and_inputs()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        rounded = layer(x)
        scores = full_precision(layer, x, dtype=layer.weight.dtype)
    assert rounded.dtype == torch.bfloat16 and len(rounded.unique()) < 8  # ties: bf16 keeps 8 bits
    assert scores.dtype == torch.float32 and len(scores.unique()) == 16
    assert torch.equal(scores, layer(x))  # fp32 inputs: exactly the fp32 layer


def test_bf16_inputs_are_cast_up_and_integer_inputs_kept():
    layer, x = _layer_and_inputs()
    keep = torch.tensor([1, 0, 1])
    out = full_precision(lambda a, k: layer(a)[:3, 0] * k, x.bfloat16(), keep, dtype=torch.float32)
    assert out.dtype == torch.float32
    assert torch.equal(out, layer(x.bfloat16().float())[:3, 0] * keep)


def test_on_a_device_without_autocast_it_is_the_plain_call_with_the_inputs_cast():
    """The meta device has no autocast (`torch.autocast` refuses it): the inputs are cast, the layer runs there."""
    assert not torch.amp.is_autocast_available("meta")
    layer = nn.Linear(4, 1).to("meta")
    got = full_precision(layer, torch.ones(3, 4, dtype=torch.bfloat16, device="meta"), dtype=layer.weight.dtype)
    assert got.device.type == "meta" and got.dtype == torch.float32 and got.shape == (3, 1)
