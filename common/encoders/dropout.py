"""Dropout whose mask costs one 64-bit random draw per four elements instead of a draw per element.

`nn.Dropout` zeroes each element with probability p and scales the others by 1 / (1 - p). On CPU
`F.dropout` draws its mask with ``bernoulli_``, one output of PyTorch's single-threaded Mersenne Twister
per element, a visible share of a small model's training step. Here an int64 ``random_()``, uniform over
[0, 2^63) (two Twister outputs), gives four 15-bit uniform integers: its four 16-bit quarters with the top
bit of each cleared. An element is kept when its integer is at least round(p * 2^15), so p is rounded to a
multiple of 2^-15 (0.1 becomes 0.1000061, 0.2 becomes 0.2000122), and the kept elements are scaled by
1 / (1 - rounded p): the expectation of the output is the input's exactly. The same distribution as
`nn.Dropout`'s up to that rounding, from another random stream (tests/common/encoders/test_dropout.py);
its speed against ``F.dropout`` is measured in results/conformer_kernel/README.md.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

#: Bits of each uniform integer: a 16-bit quarter of a draw with its top bit cleared.
BITS = 15
#: Clears the top bit of each 16-bit quarter of an int64.
QUARTERS = 0x7FFF_7FFF_7FFF_7FFF


def rounded_probability(p: float) -> float:
    """The drop probability `dropout` applies for `p`: p rounded to a multiple of 2^-15."""
    return round(p * 2**BITS) / 2**BITS


def dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    """``F.dropout(x, p, training)`` with the mask drawn as the module docstring says (p rounded to 2^-15)."""
    if not training or p == 0.0:
        return x
    threshold = round(p * 2**BITS)
    if threshold >= 2**BITS:  # p rounds to 1: everything dropped
        return x * 0.0
    n = x.numel()
    draws = torch.empty((n + 3) // 4, dtype=torch.int64, device=x.device).random_()  # uniform over [0, 2^63)
    uniform = (draws & QUARTERS).view(torch.int16)[:n].view(x.shape)  # 4 per draw, each uniform over [0, 2^15)
    return x * (uniform >= threshold).to(x.dtype).mul_(1 / (1 - threshold / 2**BITS))


class Dropout(nn.Dropout):
    """`nn.Dropout` computed by `dropout` (see the module docstring)."""

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)


def use_fast_dropout(model: nn.Module) -> nn.Module:
    """Replace every `nn.Dropout` submodule of `model` by `Dropout` with the same p, in place; returns `model`."""
    for module in list(model.modules()):
        for name, child in module.named_children():
            if type(child) is nn.Dropout:
                setattr(module, name, Dropout(child.p, inplace=child.inplace).train(child.training))
    return model
