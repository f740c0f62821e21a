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

Attention dropout takes the same mask on the CPU (`attention`): there ``F.scaled_dot_product_attention`` draws its
own with ``bernoulli_`` on the (B, H, n, m) probabilities, the largest tensor a small BERT drops (on a GPU its fused
kernels draw theirs cheaply, and `attention` leaves dropout to them). `use_fast_bert_dropout`
gives Hugging Face models both: `Dropout` modules and the attention implementation `ATTENTION`, which is ``sdpa``
itself wherever nothing is dropped (evaluation: the same outputs, bit for bit).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
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


def attention(query: Tensor, key: Tensor, value: Tensor, keep: Tensor | None, p: float, training: bool = True,
              scale: float | None = None) -> Tensor:  # fmt: skip
    """softmax(Q K^T * scale) V per head, (..., n, d) queries and (..., m, d) keys and values, `keep` a boolean mask
    broadcast to (..., n, m), True where a query may attend; the probabilities dropped by `dropout` with `p` while
    `training`. ``F.scaled_dot_product_attention`` (scale 1 / sqrt(d) by default) wherever nothing is dropped, and off
    the CPU, where its fused kernels draw their own masks at no visible cost (and keep no (n, m) probabilities)."""
    if not training or p == 0.0 or query.device.type != "cpu":
        return F.scaled_dot_product_attention(query, key, value, attn_mask=keep, scale=scale,
                                              dropout_p=p if training else 0.0)  # fmt: skip
    logits = query @ key.transpose(-1, -2) * (query.size(-1) ** -0.5 if scale is None else scale)  # (..., n, m)
    if keep is not None:
        logits = logits.masked_fill(~keep, torch.finfo(logits.dtype).min)
    return dropout(logits.softmax(-1), p) @ value  # (..., n, d)


#: The Hugging Face attention implementation of `use_fast_bert_dropout`: `attention` behind transformers'
#: ``AttentionInterface``, with ``sdpa``'s boolean masks.
ATTENTION = "sdpa_fast_dropout"


def _hf_attention(module: nn.Module, query: Tensor, key: Tensor, value: Tensor, attention_mask: Tensor | None,
                  dropout: float = 0.0, scaling: float | None = None, **kwargs) -> tuple[Tensor, None]:  # fmt: skip
    """transformers' attention interface: (B, H, n, d) heads in, (B, n, H, d) out (as ``sdpa_attention_forward``)."""
    out = attention(query, key, value, attention_mask, dropout, module.training, scaling)
    return out.transpose(1, 2).contiguous(), None


def use_fast_bert_dropout(model: nn.Module) -> nn.Module:
    """`use_fast_dropout`, and every Hugging Face model inside `model` set to attend with `ATTENTION`, in place;
    returns `model`."""
    from transformers import AttentionInterface, PreTrainedModel
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTENTION, _hf_attention)
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)
    for module in model.modules():
        if isinstance(module, PreTrainedModel):
            module.set_attn_implementation(ATTENTION)
    return use_fast_dropout(model)
